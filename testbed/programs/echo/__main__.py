"""A Pulumi program without resources that reports what it was given.

Config (all optional):
  keys  comma-separated config keys whose values to report
  env   comma-separated environment variable names whose values to report

Outputs:
  config    {key: value} for each of ``keys`` ("<unset>" if not set); values longer than
            1000 characters as "sha256:<hex> len:<n>"
  env       {name: value} for each of ``env`` ("<unset>" if not set)
  envNames  the sorted names of every environment variable the program sees
"""

import hashlib
import os

import pulumi

UNSET = "<unset>"


def names(value):
    return [name for name in (value or "").split(",") if name]


def summary(value):
    if value is None:
        return UNSET
    if len(value) <= 1000:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()
    return f"sha256:{digest} len:{len(value)}"


config = pulumi.Config()
pulumi.export("config", {key: summary(config.get(key)) for key in names(config.get("keys"))})
pulumi.export("env", {name: os.environ.get(name, UNSET) for name in names(config.get("env"))})
pulumi.export("envNames", sorted(os.environ))
