"""What every benchmark gets: the test bed, the shared fleet, the scale, a progress printer."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable

from bench.fleet import Fleet
from bench.testbed import TestBed


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big each benchmark runs; ``full`` is what docs/benchmarks.md reports."""

    stacks: int = 1000  # fleet size: latency's largest, start-up, idle, memory's first
    latency_samples: int = 200  # spec changes timed per fleet size
    idle_window: float = 120.0  # seconds of idle observed
    idle_resync: float = 10.0  # --resync-period during the idle window
    overhead_runs: int = 5  # operator and bare-CLI updates, interleaved
    parallel_updates: int = 16  # Stacks created at once per worker count
    parallel_delay: float = 5.0  # seconds each of their programs takes (config "delay")
    parallel_workers: tuple[int, ...] = (1, 2, 4, 8)
    memory_factors: tuple[int, ...] = (5, 10)  # memory also at these multiples of ``stacks``
    pod_stacks: int = 100  # the pods benchmark's fleet under the pod runner
    pod_namespaces: int = 10  # ... spread over this many namespaces
    pod_samples: int = 20  # ... of which this many are timed one at a time to a running pod
    pod_nodes: int = 2  # the nodes of the pods benchmark's cluster

    @classmethod
    def quick(cls) -> Scale:
        """A smoke run: every benchmark, small and short."""
        return cls(
            stacks=50,
            latency_samples=20,
            idle_window=20.0,
            idle_resync=5.0,
            overhead_runs=2,
            parallel_updates=4,
            parallel_delay=2.0,
            parallel_workers=(1, 2),
            memory_factors=(2,),
            pod_stacks=4,
            pod_namespaces=2,
            pod_samples=4,
        )

    def latency_sizes(self) -> list[int]:
        """Fleet sizes of the latency benchmark: 1, a tenth, all (1, 100, 1,000 in full)."""
        return sorted({1, max(1, self.stacks // 10), self.stacks})


@dataclasses.dataclass
class Context:
    """The test bed, the shared fleet of idle Stacks, the scale and progress output."""

    bed: TestBed
    fleet: Fleet
    scale: Scale
    progress: Callable[[str], None]


def progress_printer(started: float) -> Callable[[str], None]:
    """Print ``[bench +12.3s] message`` lines on stderr."""

    def say(message: str) -> None:
        sys.stderr.write(f"[bench +{time.monotonic() - started:6.1f}s] {message}\n")
        sys.stderr.flush()

    return say
