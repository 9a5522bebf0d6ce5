"""The job document: one JSON round trip, property-tested, and nothing else decodes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workspace.runner.document import (
    FluxArtifact,
    GitCheckout,
    JobDocument,
    JobDocumentError,
    RenderedProject,
    ValueRef,
)

TEXT = st.text(max_size=20)
OPTIONAL = st.none() | TEXT
NAMES = st.text(min_size=1, max_size=12)
REFS = st.builds(ValueRef, env=TEXT) | st.builds(ValueRef, value=TEXT)
SOURCES = (
    st.builds(GitCheckout, TEXT, TEXT, OPTIONAL, shallow=st.booleans())
    | st.builds(FluxArtifact, TEXT, TEXT, TEXT, OPTIONAL)
    | st.builds(RenderedProject, TEXT, TEXT)
)
DOCUMENTS = st.builds(
    JobDocument,
    source=SOURCES,
    stack=TEXT,
    git_auth=st.dictionaries(NAMES, REFS, max_size=3),
    env=st.dictionaries(NAMES, TEXT, max_size=3),
    env_refs=st.dictionaries(NAMES, REFS, max_size=3),
    config=st.dictionaries(NAMES, TEXT, max_size=3),
    secret_config=st.dictionaries(NAMES, REFS, max_size=3),
    secrets_provider=OPTIONAL,
    refresh=st.booleans(),
    expect_no_refresh_changes=st.booleans(),
    targets=st.lists(TEXT, max_size=3).map(tuple),
    target_dependents=st.booleans(),
    run_program=st.booleans(),
    environments=st.lists(TEXT, max_size=3).map(tuple),
    use_local_stack_only=st.booleans(),
    message=TEXT,
)


@settings(max_examples=300, deadline=None)
@given(DOCUMENTS)
def test_decode_undoes_encode(document: JobDocument) -> None:
    """Every document comes back equal, and equal documents encode to the same text."""
    text = document.encode()
    assert JobDocument.decode(text) == document
    assert JobDocument.decode(text).encode() == text


def _valid() -> dict[str, object]:
    valid: dict[str, object] = json.loads(
        JobDocument(GitCheckout("https://g/r.git", "c" * 40), "dev").encode()
    )
    return valid


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"source": {}}, "one of git, artifact and project"),
        ({"source": {"git": {}, "project": {}}}, "one of git, artifact and project"),
        ({"source": {"svn": {}}}, "not 'svn'"),
        ({"source": {"git": {"repo": "r"}}}, "source.git.commit is a string"),
        ({"stack": 3}, "stack is a string"),
        ({"refresh": "yes"}, "refresh is true or false"),
        ({"envRefs": {"A": {"env": "X", "value": "y"}}}, "not {'env': 'X'"),
        ({"envRefs": {"A": {}}}, "{'env': name} or {'value': value}"),
        ({"targets": "urn"}, "targets is a list"),
        ({"config": []}, "config is an object"),
    ],
)
def test_anything_else_is_refused_saying_what(change: dict[str, object], why: str) -> None:
    """A field missing, mistyped or ambiguous: ``JobDocumentError`` naming it."""
    body = {**_valid(), **change}
    with pytest.raises(JobDocumentError, match=why.replace("{", r"\{").replace("}", r"\}")):
        JobDocument.decode(json.dumps(body))


@pytest.mark.parametrize("text", ["", "not json", "[]", "null"])
def test_not_a_document_at_all(text: str) -> None:
    """Not JSON, or not an object."""
    with pytest.raises(JobDocumentError):
        JobDocument.decode(text)


def test_a_reference_has_exactly_one_of_env_and_value() -> None:
    """Built in code, too."""
    with pytest.raises(ValueError, match="exactly one"):
        ValueRef()
    with pytest.raises(ValueError, match="exactly one"):
        ValueRef(env="X", value="y")
