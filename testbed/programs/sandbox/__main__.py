"""Reports the sandbox its own process runs in, as the kernel sees it.

Outputs: ``uid``, ``capEff`` and ``capBnd`` (hex capability sets: effective and bounding;
the bounding set is what any process of the container could ever gain), ``noNewPrivs``,
``seccomp`` (0 none, 2 filter) and ``rootReadOnly`` (the root mount's options).
"""

import os

import pulumi


def status():
    with open("/proc/self/status") as handle:
        return dict(line.split(":\t", 1) for line in handle.read().splitlines() if ":\t" in line)


def root_read_only():
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            if fields[4] == "/":
                return "ro" in fields[5].split(",")
    return None


found = status()
pulumi.export("uid", os.getuid())
pulumi.export("capEff", found["CapEff"].strip())
pulumi.export("capBnd", found["CapBnd"].strip())
pulumi.export("noNewPrivs", found.get("NoNewPrivs", "").strip())
pulumi.export("seccomp", found.get("Seccomp", "").strip())
pulumi.export("rootReadOnly", root_read_only())
