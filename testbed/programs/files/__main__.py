"""A Pulumi program whose resources are files, through a Python dynamic provider.

Config (all optional but ``path``):
  path     the file to manage (absolute)
  content  what to write into it (default "hello")
  delay    seconds each create/update takes (default 0)
  fail     if set, create/update raise an error with this message
  allocate MiB the program itself fills and holds before it declares its resource (default
           0): past the run pod's memory limit, it is OOM-killed

Outputs: ``path``, ``content``, and ``secretContent`` (the content, marked secret).
"""

import os
import time

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult


class FileProvider(ResourceProvider):
    def _write(self, props):
        if props.get("delay"):
            time.sleep(float(props["delay"]))
        if props.get("fail"):
            raise RuntimeError(props["fail"])
        with open(props["path"], "w", encoding="utf-8") as handle:
            handle.write(props["content"])

    def create(self, props):
        self._write(props)
        return CreateResult(id_=props["path"], outs=props)

    def diff(self, _id, olds, news):
        keys = ("path", "content", "fail")
        changes = [k for k in keys if olds.get(k) != news.get(k)]
        return DiffResult(
            changes=bool(changes),
            replaces=["path"] if "path" in changes else [],
            delete_before_replace=True,
        )

    def update(self, _id, _olds, news):
        self._write(news)
        return UpdateResult(outs=news)

    def delete(self, _id, props):
        try:
            os.remove(props["path"])
        except FileNotFoundError:
            pass


class File(Resource):
    path: pulumi.Output[str]
    content: pulumi.Output[str]

    def __init__(self, name, props, opts=None):
        super().__init__(FileProvider(), name, props, opts)


config = pulumi.Config()
# Filled (not just reserved), so that every page counts against the memory limit.
ballast = b"\x01" * (int(config.get("allocate") or 0) << 20)
managed = File(
    "file",
    {
        "path": config.require("path"),
        "content": config.get("content") or "hello",
        "delay": config.get("delay") or "",
        "fail": config.get("fail") or "",
    },
)
pulumi.export("path", managed.path)
pulumi.export("content", managed.content)
pulumi.export("secretContent", pulumi.Output.secret(managed.content))
