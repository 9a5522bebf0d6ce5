"""Label selectors: apimachinery's grammar, the canonical form, and matching.

The expectations are those of ``labels.Parse`` and ``Selector.Matches`` in
``k8s.io/apimachinery/pkg/labels`` (its ``selector_test.go`` cases among them);
``test_labels_apiserver.py`` checks the same against a real kube-apiserver.
"""

from __future__ import annotations

import pytest

from controller.labels import (
    EVERYTHING,
    Operator,
    Requirement,
    Selector,
    SelectorError,
    parse_selector,
)

VALID = {
    # selector: its canonical form
    "": "",
    " \t\r\n ": "",
    "x=a,y=b,z=c": "x=a,y=b,z=c",
    "x!=a,y=b": "x!=a,y=b",
    "x=,z= ": "x=,z=",
    "x= ,z= ": "x=,z=",
    "!x": "!x",
    "x>1": "x>1",
    "x>1,z<5": "x>1,z<5",
    "x==a": "x=a",
    "x in (a)": "x in (a)",
    "x in (b,a)": "x in (a,b)",
    "x in (a,a,a)": "x in (a)",
    "x in (foo,,baz),y,z notin ()": "x in (,baz,foo),y,z notin ()",
    "x in (,)": "x in ()",
    "x in (,,)": "x in ()",
    "x in (a,,,b)": "x in (,a,b)",
    "x in ()": "x in ()",
    "x in (,a)": "x in (,a)",
    "x notin (a)": "x notin (a)",
    "x in   ( a , b )": "x in (a,b)",
    "in=in": "in=in",
    "notin in (in,notin)": "notin in (in,notin)",
    "x=in": "x=in",
    "z,y,x": "x,y,z",
    "b=1,a=2,a=2": "a=2,b=1",
    "a!=2,a!=1": "a!=1,a!=2",
    "example.com/team=platform": "example.com/team=platform",
    "pulumi-stack-operator.dev/shard notin (a,b)": "pulumi-stack-operator.dev/shard notin (a,b)",
    "a_b.c-d=E_F.g-1": "a_b.c-d=E_F.g-1",
    "x=" + "a" * 63: "x=" + "a" * 63,
    "k" * 63: "k" * 63,
    "x>007": "x>007",
    "x<9223372036854775807": "x<9223372036854775807",
}

INVALID = [
    "x=a==",
    "x=a||y=b",
    "x==a==b",
    "!x=a",
    "x<a",
    "x>-1",
    "x>+1",
    "x>1.5",
    "x>",
    "x<9223372036854775808",
    "x in",
    "x in (",
    "x in (a",
    "x in a",
    "x in (a b)",
    "x in (a,b",
    "x notin",
    "x notin a",
    "x=(a)",
    "x=a b",
    "x b",
    "x!b",
    "x<=1",
    "x>=1",
    "x=a,",
    ",x=a",
    "x,,y",
    "x=a,,y=b",
    "=a",
    "!",
    "!=a",
    "()",
    "x=a)",
    "x=!a",
    "x/y/z=a",
    "/x=a",
    "x/=a",
    "Example.com/x=a",
    "example..com/x=a",
    "-x=a",
    "x-=a",
    "x=-a",
    "x=a-",
    "x=a/b",
    "x=ä",
    "ä=x",
    "k" * 64,
    "x=" + "a" * 64,
    "a" * 254 + "/x=a",
]


@pytest.mark.parametrize(("text", "canonical"), list(VALID.items()))
def test_a_valid_selector_parses_to_its_canonical_form(text: str, canonical: str) -> None:
    """Every selector ``labels.Parse`` accepts parses; ``str()`` is the canonical form."""
    selector = parse_selector(text)
    assert str(selector) == canonical
    assert parse_selector(canonical) == selector  # the canonical form stands for it


@pytest.mark.parametrize("text", INVALID)
def test_an_invalid_selector_is_refused(text: str) -> None:
    """Every string ``labels.Parse`` refuses raises ``SelectorError`` (a ``ValueError``)."""
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("x=a,", "expected: identifier after ','"),
        ("x in (a", "found the end of the selector, expected: ',' or ')'"),
        ("x b", "found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("x>a", "the value must be an integer"),
        ("Bad/x", "is not a DNS subdomain"),
        ("x=" + "a" * 64, "no more than 63 characters"),
        ("x=a-", "must start and end with an alphanumeric character"),
    ],
)
def test_the_error_says_what_is_wrong(text: str, says: str) -> None:
    """The message names the offending part as apimachinery's does, or the broken rule."""
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    assert says in str(caught.value)


def test_the_parsed_requirements() -> None:
    """Keys, operators and values as apimachinery records them (``==`` is ``=``)."""
    selector = parse_selector("a=b,c!=d,e in (y,x),!f,g,h notin (z),i==j,k>1,l<2")
    assert selector.requirements == (
        Requirement("a", Operator.EQUALS, ("b",)),
        Requirement("c", Operator.NOT_EQUALS, ("d",)),
        Requirement("e", Operator.IN, ("x", "y")),
        Requirement("f", Operator.DOES_NOT_EXIST, ()),
        Requirement("g", Operator.EXISTS, ()),
        Requirement("h", Operator.NOT_IN, ("z",)),
        Requirement("i", Operator.EQUALS, ("j",)),
        Requirement("k", Operator.GREATER_THAN, ("1",)),
        Requirement("l", Operator.LESS_THAN, ("2",)),
    )
    assert str(selector) == "a=b,c!=d,e in (x,y),!f,g,h notin (z),i=j,k>1,l<2"


def test_spellings_of_one_selector_share_one_canonical_form() -> None:
    """Order, spacing, ``==`` and repeats do not change the canonical form."""
    forms = {
        str(parse_selector(text))
        for text in ("a=1,b in (y,x)", " b in ( x , y ) , a == 1 ", "b in (x,y,x),a=1,a=1")
    }
    assert forms == {"a=1,b in (x,y)"}


def test_the_empty_selector_selects_everything() -> None:
    """The empty string parses to ``EVERYTHING``: no requirement, every object matches."""
    assert parse_selector("") == EVERYTHING
    assert EVERYTHING.empty
    assert EVERYTHING.matches({})
    assert EVERYTHING.selects({"metadata": {"name": "x"}})
    assert not parse_selector("a").empty


LABELS = {"shard": "a", "tier": "web", "n": "7"}


@pytest.mark.parametrize(
    ("text", "selected"),
    [
        ("shard=a", True),
        ("shard==a", True),
        ("shard=b", False),
        ("shard!=a", False),
        ("shard!=b", True),
        ("missing!=b", True),  # != matches an object without the label
        ("missing=b", False),
        ("shard in (a,b)", True),
        ("shard in (b,c)", False),
        ("missing in (a)", False),
        ("shard notin (a,b)", False),
        ("shard notin (b)", True),
        ("missing notin (a)", True),  # notin too
        ("shard", True),
        ("missing", False),
        ("!shard", False),
        ("!missing", True),
        ("n>6", True),
        ("n>7", False),
        ("n<8", True),
        ("n<7", False),
        ("tier>1", False),  # not an integer: never greater, never less
        ("tier<1", False),
        ("missing>1", False),
        ("shard=a,tier=web", True),
        ("shard=a,tier=db", False),  # every requirement must hold
        ("missing=", False),
        ("missing in ()", False),
        ("missing notin ()", True),
    ],
)
def test_matching(text: str, selected: bool) -> None:  # noqa: FBT001 - a parameter
    """``matches`` is apimachinery's ``Selector.Matches``."""
    selector = parse_selector(text)
    assert selector.matches(LABELS) is selected
    assert selector.selects({"metadata": {"name": "s", "labels": LABELS}}) is selected


def test_an_empty_label_value_is_a_value() -> None:
    """``a=`` selects the label with the empty value, not its absence."""
    assert parse_selector("a=").matches({"a": ""})
    assert not parse_selector("a=").matches({})
    assert parse_selector("a in (,x)").matches({"a": ""})


def test_an_object_without_labels_is_read_as_having_none() -> None:
    """No ``metadata.labels`` (or no metadata): the empty label set."""
    assert parse_selector("!shard").selects({"metadata": {"name": "x"}})
    assert parse_selector("!shard").selects({"metadata": {"name": "x", "labels": None}})
    assert not parse_selector("shard").selects({})


def test_a_selector_is_a_value() -> None:
    """Frozen and comparable: equal when their requirements are."""
    assert parse_selector("a=1,b") == Selector(
        (Requirement("a", Operator.EQUALS, ("1",)), Requirement("b", Operator.EXISTS, ()))
    )
    assert hash(parse_selector("a=1")) == hash(parse_selector("a==1"))
