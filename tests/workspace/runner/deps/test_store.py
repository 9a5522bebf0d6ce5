"""The store of installed environments: built once per key, held while used, evicted LRU."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from workspace.runner.deps.store import DependencyStore, Entry, disk_usage, remove
from workspace.runner.deps.tools import ToolStoppedError

MIB = 1024 * 1024


def filler(size: int) -> Callable[[Entry], None]:
    """A build step writing ``size`` bytes into the entry, then finishing it."""

    def build(entry: Entry) -> None:
        (entry.path / "payload").write_bytes(os.urandom(size))
        entry.finish("nodejs", "npm ci")

    return build


def test_an_entry_is_built_once_then_found(tmp_path: Path) -> None:
    """An unchanged program installs nothing on its next run."""
    store, built = DependencyStore(tmp_path, 0), []

    def build(entry: Entry) -> None:
        built.append(entry.name)
        (entry.path / "node_modules").mkdir()
        entry.finish("nodejs", "npm ci")

    entry = store.entry("nodejs", "abc")
    with store.using(entry, build, threading.Event()) as hit:
        assert not hit
        assert (entry.path / "node_modules").is_dir()
    with store.using(entry, build, threading.Event()) as hit:
        assert hit
    assert built == ["nodejs-abc"]


def test_a_failed_build_leaves_nothing_and_is_built_again(tmp_path: Path) -> None:
    """A failed install leaves no half-made environment that a later run would take as good."""
    store = DependencyStore(tmp_path, 0)
    entry = store.entry("python", "k")

    def broken(entry: Entry) -> None:
        (entry.path / "venv").mkdir()
        raise RuntimeError("pip failed")

    with pytest.raises(RuntimeError), store.using(entry, broken, threading.Event()):
        pass
    assert not entry.path.exists()
    with store.using(entry, filler(10), threading.Event()) as hit:
        assert not hit
    assert entry.complete()


def test_a_leftover_without_its_marker_is_rebuilt(tmp_path: Path) -> None:
    """An install that died (no .complete marker) is done again from an empty directory."""
    store = DependencyStore(tmp_path, 0)
    entry = store.entry("nodejs", "k")
    (entry.path / "node_modules" / "half").mkdir(parents=True)
    with store.using(entry, filler(10), threading.Event()) as hit:
        assert not hit
    assert not (entry.path / "node_modules").exists()


def test_two_runs_of_one_key_build_it_once(tmp_path: Path) -> None:
    """Two runs needing the same environment at once: one installs, the other waits and uses it."""
    store, calls = DependencyStore(tmp_path, 0), []
    started, release = threading.Event(), threading.Event()
    hits: list[bool] = []

    def slow(entry: Entry) -> None:
        calls.append(entry.name)
        started.set()
        release.wait(10)  # until the other run waits for the lock
        entry.finish("nodejs", "npm ci")

    def use() -> None:
        with store.using(store.entry("nodejs", "k"), slow, threading.Event(), release.set) as hit:
            hits.append(hit)

    first = threading.Thread(target=use)
    first.start()
    assert started.wait(10)
    use()
    first.join(10)
    assert calls == ["nodejs-k"]
    assert sorted(hits) == [False, True]
    assert release.is_set()  # the second run did wait


def test_stop_ends_the_wait_for_another_runs_install(tmp_path: Path) -> None:
    """A stopped run does not wait for another run's install to finish."""
    store, release, building = DependencyStore(tmp_path, 0), threading.Event(), threading.Event()
    entry = store.entry("nodejs", "k")

    def blocked(entry: Entry) -> None:
        building.set()
        release.wait(10)
        entry.finish("nodejs", "npm ci")

    def install() -> None:
        with store.using(entry, blocked, threading.Event()):
            pass

    thread = threading.Thread(target=install)
    thread.start()
    assert building.wait(10)
    stop = threading.Event()
    stop.set()
    with pytest.raises(ToolStoppedError), store.using(entry, filler(1), stop):
        pass
    release.set()
    thread.join(10)
    assert entry.complete()


def test_eviction_removes_the_least_recently_used_unheld_entries(tmp_path: Path) -> None:
    """Over the limit, the least recently used environments go first, never one in use."""
    store = DependencyStore(tmp_path, 3 * MIB)
    names = ["a", "b", "c", "d"]
    for name in names:
        with store.using(store.entry("nodejs", name), filler(MIB), threading.Event()):
            pass
    for age, name in enumerate(names):  # a is the oldest use, d the newest
        marker = store.entry("nodejs", name).path / ".complete"
        os.utime(marker, (1000 + age, 1000 + age))
    held = store.entry("nodejs", "a")
    with store.using(held, filler(MIB), threading.Event()) as hit:
        assert hit
        os.utime(held.path / ".complete", (1, 1))  # the oldest, but in use
        usage = store.evict()
    assert held.complete()
    assert not store.entry("nodejs", "b").complete()
    assert store.entry("nodejs", "c").complete()
    assert store.entry("nodejs", "d").complete()
    assert usage.environments <= 3 * MIB + 3 * 64 * 1024


def test_downloads_are_emptied_when_entries_alone_do_not_fit(tmp_path: Path) -> None:
    """Download caches are emptied whole when removing environments is not enough."""
    store = DependencyStore(tmp_path, MIB)
    (store.downloads("npm") / "blob").write_bytes(os.urandom(2 * MIB))
    usage = store.evict()
    assert usage.downloads == 0
    assert not (tmp_path / "downloads").exists()


def test_downloads_in_use_are_kept(tmp_path: Path) -> None:
    """A download cache an install is using is never emptied under it."""
    store = DependencyStore(tmp_path, MIB)
    (store.downloads("pip") / "blob").write_bytes(os.urandom(2 * MIB))
    with store.downloading(threading.Event()):
        usage = store.evict()
    assert usage.downloads >= 2 * MIB
    assert (store.downloads("pip") / "blob").exists()


def test_no_limit_evicts_nothing(tmp_path: Path) -> None:
    """A limit of 0 means no limit."""
    store = DependencyStore(tmp_path, 0)
    with store.using(store.entry("go", "k"), filler(MIB), threading.Event()):
        pass
    assert store.evict().environments >= MIB
    assert store.entry("go", "k").complete()


def test_remove_deletes_read_only_trees(tmp_path: Path) -> None:
    """Go makes its module cache read-only; eviction still removes it."""
    tree = tmp_path / "mod" / "example.com@v1"
    tree.mkdir(parents=True)
    (tree / "go.mod").write_text("module example.com\n")
    (tree / "go.mod").chmod(0o444)
    tree.chmod(0o555)
    remove(tmp_path / "mod")
    assert not (tmp_path / "mod").exists()


def test_disk_usage_counts_files_not_symlink_targets(tmp_path: Path) -> None:
    """Sizes count what a tree holds, not what its symlinks point at."""
    (tmp_path / "big").write_bytes(os.urandom(MIB))
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "link").symlink_to(tmp_path / "big")
    assert MIB <= disk_usage(tmp_path) < MIB + 64 * 1024
