"""``workspace.runner.envfile``: what a run pod's init containers write into ``$PULUMI_ENV``."""

from __future__ import annotations

from pathlib import Path

import pytest

from workspace.runner.envfile import MAX_BYTES, EnvFileError, parse, read

WRITTEN = (
    "# written by the init container",
    "PULUMI_CONFIG_PASSPHRASE=test",
    "",
    "export TOKEN='a b # not a comment'",
    'GREETING="say \\"hi\\"\\nthen go"',
    "PLAIN=value # a comment",
    "EMPTY=",
    "TOKEN=second",
)


def test_lines_a_shell_writes_are_read() -> None:
    """``NAME=value``, ``export``, quotes, comments and blank lines; a later line wins."""
    assert parse("\n".join(WRITTEN)) == {
        "PULUMI_CONFIG_PASSPHRASE": "test",
        "TOKEN": "second",
        "GREETING": 'say "hi"\nthen go',
        "PLAIN": "value",
        "EMPTY": "",
    }


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("not a line", "line 2: not NAME=value"),
        ("1ABC=x", "line 2: not NAME=value"),
        ("PSO_JOB=x", "line 2: PSO_JOB is set by the runner itself"),
        ("PULUMI_HOME=/tmp", "line 2: PULUMI_HOME is set by the runner itself"),
        ("QUOTED='open", "line 2: the value of QUOTED has no closing '"),
        ('AFTER="done" more', "line 2: text after the quoted value of AFTER"),
    ],
)
def test_a_line_that_cannot_be_used_is_named_without_its_value(line: str, said: str) -> None:
    """The error names the file, the line and the name; the value never."""
    with pytest.raises(EnvFileError) as raised:
        parse(f"OK=s3cr3t-value\n{line}", "/share/.env")
    assert str(raised.value).startswith("/share/.env, ")
    assert said in str(raised.value)
    assert "s3cr3t" not in str(raised.value)


def test_no_file_is_no_variables_and_a_huge_one_is_refused(tmp_path: Path) -> None:
    """An init container that wrote nothing changes nothing; a data dump is not an env."""
    assert read(tmp_path / ".env") == {}
    big = tmp_path / "big.env"
    big.write_text("A=" + "x" * MAX_BYTES)
    with pytest.raises(EnvFileError, match="more than the"):
        read(big)
    binary = tmp_path / "binary.env"
    binary.write_bytes(b"A=\xff\xfe")
    with pytest.raises(EnvFileError, match="not UTF-8"):
        read(binary)
