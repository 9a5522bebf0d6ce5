"""Debian's Prometheus, scraping one target every second, with a query helper.

Prometheus applies discovered targets in 5-second batches, so the first sample of a
target arrives about 6 s after start: ``wait_for`` polls a query instead of sleeping.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from testbed.process import Process, free_port
from testbed.waits import wait_for

INSTALL_HINT = "apt-get install -y --no-install-recommends prometheus"


def find_binary(name: str) -> Path | None:
    """Return ``prometheus`` or ``promtool`` from PATH, if Debian's package is installed."""
    found = shutil.which(name)
    return Path(found) if found else None


def check_metrics(exposition: str) -> subprocess.CompletedProcess[str]:
    """Lint a text exposition with ``promtool check metrics`` (exit 0 = clean, 3 = lint)."""
    promtool = find_binary("promtool")
    assert promtool is not None
    return subprocess.run(
        [str(promtool), "check", "metrics"],
        input=exposition,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


class Prometheus:
    """A Prometheus server scraping at a 1 s interval and evaluating rules every second.

    It scrapes ``target`` (host:port) as job ``operator``, or the ``scrape_configs`` given
    (e.g. Kubernetes service discovery); ``rule_files`` are Prometheus rule files.
    """

    def __init__(
        self,
        binary: Path,
        root: Path,
        target: str | None = None,
        *,
        scrape_configs: list[dict[str, Any]] | None = None,
        rule_files: list[Path] | None = None,
    ) -> None:
        """Prepare (not start) a server whose data and config live under ``root``."""
        self.binary, self.root, self.target = binary, root, target
        if scrape_configs is None:
            assert target is not None, "a target or scrape_configs"
            scrape_configs = [{"job_name": "operator", "static_configs": [{"targets": [target]}]}]
        self.scrape_configs, self.rule_files = scrape_configs, list(rule_files or [])
        self.port = free_port()
        self._process: Process | None = None

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Write the config, start the server and wait for ``/-/ready``."""
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "prometheus.yml"
        # JSON is YAML; scrape_timeout may not exceed scrape_interval.
        config.write_text(
            json.dumps(
                {
                    "global": {
                        "scrape_interval": "1s",
                        "scrape_timeout": "1s",
                        "evaluation_interval": "1s",
                    },
                    "scrape_configs": self.scrape_configs,
                    "rule_files": [str(path) for path in self.rule_files],
                }
            )
        )
        argv = [
            str(self.binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={self.root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        self._process = Process("prometheus", argv, self.root / "logs")
        self._process.start(lambda: _status(f"{self.url}/-/ready") == 200)

    def stop(self) -> None:
        """Stop the server."""
        if self._process is not None:
            self._process.stop()

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Run an instant query; returns the result vector."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
            body = json.load(response)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(self, promql: str, timeout: float = 30) -> list[dict[str, Any]]:
        """Poll ``promql`` until it returns a non-empty vector; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if result or time.monotonic() > deadline:
                return result
            time.sleep(0.5)

    def alerting_rule(self, name: str) -> dict[str, Any]:
        """The alerting rule ``name`` as the rules API reports it: its state, last evaluation."""
        url = f"{self.url}/api/v1/rules?type=alert"
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
            body = json.load(response)
        assert body["status"] == "success", body
        for group in body["data"]["groups"]:
            for rule in group["rules"]:
                if rule["name"] == name:
                    found: dict[str, Any] = rule
                    return found
        msg = f"Prometheus has no alerting rule {name}"
        raise AssertionError(msg)

    def evaluated_after(self, name: str, moment: float, timeout: float = 30) -> dict[str, Any]:
        """Poll until the alerting rule ``name`` was evaluated after ``moment``; returns it.

        ``moment`` is a ``time.time()`` reading. An evaluation that started after it saw
        every sample a query had returned before it: its ``state`` judges that data.
        """

        def evaluated() -> dict[str, Any] | None:
            rule = self.alerting_rule(name)
            last = datetime.datetime.fromisoformat(rule["lastEvaluation"]).timestamp()
            return rule if last > moment else None

        return wait_for(evaluated, f"an evaluation of {name}", timeout, interval=0.2)


def _status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback
        return int(response.status)
