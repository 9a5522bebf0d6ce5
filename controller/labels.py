"""Label selectors: the string syntax of ``kubectl -l`` and of a list's ``labelSelector``.

Role: check a selector the way the API server will, before anything is listed (a flag
that does not parse is a usage error at start-up, not a 400 on every list), give it one
canonical spelling, and match labels with it locally (so that the process can tell what
the server would have filtered out).

The grammar, the lexer's quirks and the checks are apimachinery's ``labels.Parse``
(``k8s.io/apimachinery/pkg/labels/selector.go``, as the Kubernetes 1.36 API server of the
test bed runs it), which the API server applies to the ``labelSelector`` of a list or
watch (``tests/controller/test_labels_apiserver.py`` compares the two)::

    <selector>    ::= <requirement> | <requirement> "," <selector>
    <requirement> ::= [!] KEY [ ("in" | "notin") "(" VALUE ("," VALUE)* ")"
                              | ("=" | "==" | "!=" | ">" | "<") VALUE ]

- whitespace (space, tab, CR, LF) separates tokens and is otherwise ignored; the special
  symbols are ``= ! ( ) , > <``, read greedily (``!=``, ``==``); everything else up to
  whitespace or a special symbol is one word, and the words ``in`` and ``notin`` are
  operators only right after a key;
- ``KEY`` is a qualified name: an optional DNS-subdomain prefix and ``/``, then 1-63 of
  ``[A-Za-z0-9_.-]``, starting and ending alphanumeric; ``VALUE`` is a label value: at
  most 63 of the same characters, empty allowed (``a=``, ``a in (,x)``, ``a in ()``);
- ``>`` and ``<`` take one integer (64-bit) value; the label must hold an integer greater
  (less) than it;
- ``key`` alone requires the label, ``!key`` its absence; ``!=`` and ``notin`` also match
  an object without the label; every requirement must hold (AND).

Guarantees: ``parse_selector`` accepts exactly the strings ``labels.Parse`` accepts
(raising ``SelectorError`` with the reason otherwise), and ``str()`` of what it returns is
the canonical form: requirements unique and ordered by key (then by their own canonical
spelling), values sorted and unique, ``==`` written ``=``, no whitespace but the one
around ``in``/``notin``. The canonical form parses back to an equal selector and selects
the same objects as the original, so it can stand for it in a list call, a log line or a
Lease name. ``matches`` is apimachinery's ``Selector.Matches``.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterator, Mapping
from typing import Final

from controller.names import is_dns_subdomain

LABEL_MAX: Final = 63
"""The most characters of a label value and of a key's name part."""
_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_INTEGER: Final = re.compile(r"[+-]?[0-9]+")  # Go's strconv.ParseInt(s, 10, 64), range aside
_INT64: Final = range(-(2**63), 2**63)
_WHITESPACE: Final = frozenset(" \t\r\n")
_SPECIAL: Final = frozenset("=!(),><")


class SelectorError(ValueError):
    """The string is not a label selector the API server accepts; the message says why."""


class Operator(enum.Enum):
    """A requirement's operator, as apimachinery's ``selection.Operator`` spells it."""

    IN = "in"
    NOT_IN = "notin"
    EQUALS = "="
    NOT_EQUALS = "!="
    GREATER_THAN = "gt"
    LESS_THAN = "lt"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One condition on one label: ``key``, ``operator`` and the sorted, unique ``values``."""

    key: str
    operator: Operator
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with ``labels`` meets this requirement."""
        has = self.key in labels
        match self.operator:
            case Operator.IN | Operator.EQUALS:
                return has and labels[self.key] in self.values
            case Operator.NOT_IN | Operator.NOT_EQUALS:
                return not has or labels[self.key] not in self.values
            case Operator.EXISTS:
                return has
            case Operator.DOES_NOT_EXIST:
                return not has
            case Operator.GREATER_THAN | Operator.LESS_THAN:
                value = _integer(labels[self.key]) if has else None
                if value is None:
                    return False
                bound = int(self.values[0])
                return value > bound if self.operator is Operator.GREATER_THAN else value < bound

    def __str__(self) -> str:
        """The canonical spelling (apimachinery's ``Requirement.String``, ``==`` as ``=``)."""
        match self.operator:
            case Operator.EXISTS:
                return self.key
            case Operator.DOES_NOT_EXIST:
                return f"!{self.key}"
            case Operator.IN | Operator.NOT_IN:
                return f"{self.key} {self.operator.value} ({','.join(self.values)})"
            case Operator.GREATER_THAN:
                return f"{self.key}>{self.values[0]}"
            case Operator.LESS_THAN:
                return f"{self.key}<{self.values[0]}"
            case _:
                return f"{self.key}{self.operator.value}{self.values[0]}"


@dataclasses.dataclass(frozen=True)
class Selector:
    """Requirements that must all hold; none selects every object."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        """Whether the selector selects every object (no requirement)."""
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with ``labels`` is selected."""
        return all(requirement.matches(labels) for requirement in self.requirements)

    def selects(self, obj: Mapping[str, object]) -> bool:
        """Whether the Kubernetes object ``obj`` is selected (by its ``metadata.labels``)."""
        metadata = obj.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        return self.matches(labels if isinstance(labels, Mapping) else {})

    def __str__(self) -> str:
        """The canonical form (see the module docstring); "" for the empty selector."""
        return ",".join(str(requirement) for requirement in self.requirements)


EVERYTHING: Final = Selector()
"""The empty selector: every object."""


def parse_selector(text: str) -> Selector:
    """Parse ``text`` as the API server parses a ``labelSelector`` (module docstring).

    Raises:
        SelectorError: ``text`` is not a selector; the message names the offending part.
    """
    requirements = set(_Parser(text).parse())  # "a,a" is "a"
    return Selector(tuple(sorted(requirements, key=lambda r: (r.key, str(r)))))


def _integer(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it; None if it cannot."""
    if _INTEGER.fullmatch(text) is None:
        return None
    value = int(text)
    return value if value in _INT64 else None


def check_key(key: str) -> None:
    """Raise ``SelectorError`` unless ``key`` is a qualified name (``[prefix/]name``)."""
    if key.count("/") > 1:
        msg = f"{key!r}: a label key is a name with an optional DNS subdomain prefix and '/'"
        raise SelectorError(msg)
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        msg = f"{key!r}: the prefix before '/' must not be empty"
        raise SelectorError(msg)
    if slash and not is_dns_subdomain(prefix):
        msg = (
            f"{key!r}: the prefix {prefix!r} is not a DNS subdomain (lower case, digits, '-', '.')"
        )
        raise SelectorError(msg)
    if not name:
        msg = f"{key!r}: the name part must not be empty"
        raise SelectorError(msg)
    if len(name) > LABEL_MAX:
        msg = f"{key!r}: the name part must be no more than {LABEL_MAX} characters"
        raise SelectorError(msg)
    if _NAME.fullmatch(name) is None:
        msg = (
            f"{key!r}: the name part must consist of alphanumeric characters, '-', '_' or '.',"
            " and must start and end with an alphanumeric character"
        )
        raise SelectorError(msg)


def check_value(key: str, value: str) -> None:
    """Raise ``SelectorError`` unless ``value`` is a label value (empty allowed)."""
    if len(value) > LABEL_MAX:
        msg = f"{key}: the value {value!r} must be no more than {LABEL_MAX} characters"
        raise SelectorError(msg)
    if value and _NAME.fullmatch(value) is None:
        msg = (
            f"{key}: the value {value!r} must consist of alphanumeric characters, '-', '_' or"
            " '.', and must start and end with an alphanumeric character"
        )
        raise SelectorError(msg)


class _Token(enum.Enum):
    END = "end of string"
    CLOSE = ")"
    COMMA = ","
    NOT = "!"
    DOUBLE_EQUALS = "=="
    EQUALS = "="
    GREATER = ">"
    WORD = "identifier"
    IN = "in"
    LESS = "<"
    NOT_EQUALS = "!="
    NOT_IN = "notin"
    OPEN = "("


_SYMBOLS: Final = {
    token.value: token
    for token in (
        _Token.CLOSE,
        _Token.COMMA,
        _Token.NOT,
        _Token.DOUBLE_EQUALS,
        _Token.EQUALS,
        _Token.GREATER,
        _Token.LESS,
        _Token.NOT_EQUALS,
        _Token.OPEN,
    )
}
_KEYWORDS: Final = {"in": _Token.IN, "notin": _Token.NOT_IN}
_OPERATORS: Final = {
    _Token.IN: Operator.IN,
    _Token.NOT_IN: Operator.NOT_IN,
    _Token.EQUALS: Operator.EQUALS,
    _Token.DOUBLE_EQUALS: Operator.EQUALS,  # the same meaning; spelt "=" when canonical
    _Token.NOT_EQUALS: Operator.NOT_EQUALS,
    _Token.GREATER: Operator.GREATER_THAN,
    _Token.LESS: Operator.LESS_THAN,
}
_EXPECTED_OPERATOR: Final = "in, notin, =, ==, !=, gt, lt"  # apimachinery's list


def _shown(literal: str) -> str:
    """A token's text in a message: the end of the string has none."""
    return repr(literal) if literal else "the end of the selector"


def _lex(text: str) -> Iterator[tuple[_Token, str]]:
    """Tokens and their text, ending with ``END`` (apimachinery's ``Lexer``)."""
    position = 0
    while True:
        while position < len(text) and text[position] in _WHITESPACE:
            position += 1
        if position == len(text):
            yield _Token.END, ""
            return
        start = position
        if text[position] in _SPECIAL:
            # Greedy: the longest run of special symbols that is still a token.
            token = _SYMBOLS[text[position]]
            position += 1
            while position < len(text) and text[start : position + 1] in _SYMBOLS:
                token = _SYMBOLS[text[start : position + 1]]
                position += 1
            yield token, text[start:position]
            continue
        while position < len(text) and not (
            text[position] in _SPECIAL or text[position] in _WHITESPACE
        ):
            position += 1
        word = text[start:position]
        yield _KEYWORDS.get(word, _Token.WORD), word


class _Parser:
    """apimachinery's ``Parser``: a recursive descent over the lexed tokens."""

    def __init__(self, text: str) -> None:
        self._items = list(_lex(text))
        self._position = 0

    def _peek(self, *, values: bool = True) -> tuple[_Token, str]:
        """The next token; in a value context ``in`` and ``notin`` are plain words."""
        token, literal = self._items[self._position]
        if values and token in (_Token.IN, _Token.NOT_IN):
            token = _Token.WORD
        return token, literal

    def _take(self, *, values: bool = True) -> tuple[_Token, str]:
        found = self._peek(values=values)
        self._position += 1
        return found

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            token, literal = self._peek()
            if token is _Token.END:
                return requirements
            if token not in (_Token.WORD, _Token.NOT):
                msg = f"found {_shown(literal)}, expected: !, identifier, or 'end of string'"
                raise SelectorError(msg)
            requirements.append(self._requirement())
            token, literal = self._take()
            if token is _Token.END:
                return requirements
            if token is not _Token.COMMA:
                msg = f"found {_shown(literal)}, expected: ',' or 'end of string'"
                raise SelectorError(msg)
            following, literal = self._peek()
            if following not in (_Token.WORD, _Token.NOT):
                msg = f"found {_shown(literal)}, expected: identifier after ','"
                raise SelectorError(msg)

    def _requirement(self) -> Requirement:
        absent = False
        token, key = self._take()
        if token is _Token.NOT:
            absent = True
            token, key = self._take()
        if token is not _Token.WORD:
            msg = f"found {_shown(key)}, expected: identifier"
            raise SelectorError(msg)
        check_key(key)
        if absent:  # "!key=v" fails in ``parse``, at the "="
            return Requirement(key, Operator.DOES_NOT_EXIST, ())
        if self._peek()[0] in (_Token.END, _Token.COMMA):
            return Requirement(key, Operator.EXISTS, ())
        token, literal = self._take(values=False)
        operator = _OPERATORS.get(token)
        if operator is None:
            msg = f"found {_shown(literal)}, expected: {_EXPECTED_OPERATOR}"
            raise SelectorError(msg)
        if operator in (Operator.IN, Operator.NOT_IN):
            values = self._value_set()
        else:
            values = {self._exact_value()}
        for value in values:
            check_value(key, value)
        if operator in (Operator.GREATER_THAN, Operator.LESS_THAN):
            [value] = values
            if _integer(value) is None:
                msg = f"{key}: for 'gt', 'lt' operators, the value must be an integer: {value!r}"
                raise SelectorError(msg)
        return Requirement(key, operator, tuple(sorted(values)))

    def _value_set(self) -> set[str]:
        """``( value, ... )``, with apimachinery's reading of empty values."""
        token, literal = self._take()
        if token is not _Token.OPEN:
            msg = f"found {_shown(literal)}, expected: '('"
            raise SelectorError(msg)
        token, literal = self._peek()
        if token is _Token.CLOSE:  # "()" is the empty value
            self._take()
            return {""}
        if token not in (_Token.WORD, _Token.COMMA):
            msg = f"found {_shown(literal)}, expected: ',', ')' or identifier"
            raise SelectorError(msg)
        values = self._identifiers()
        token, literal = self._take()
        if token is not _Token.CLOSE:
            msg = f"found {_shown(literal)}, expected: ')'"
            raise SelectorError(msg)
        return values

    def _identifiers(self) -> set[str]:
        """Values up to ``)``: empty entries are the empty value (``parseIdentifiersList``)."""
        values: set[str] = set()
        while True:
            token, literal = self._take()
            if token is _Token.WORD:
                values.add(literal)
                following, literal = self._peek()
                if following is _Token.CLOSE:
                    return values
                if following is not _Token.COMMA:
                    msg = f"found {_shown(literal)}, expected: ',' or ')'"
                    raise SelectorError(msg)
            elif token is _Token.COMMA:
                if not values:
                    values.add("")  # "(,"
                following, _ = self._peek()
                if following is _Token.CLOSE:
                    values.add("")  # ",)"
                    return values
                if following is _Token.COMMA:
                    values.add("")  # ",,"
            else:
                msg = f"found {_shown(literal)}, expected: ',', or identifier"
                raise SelectorError(msg)

    def _exact_value(self) -> str:
        """The one value after ``=``, ``==``, ``!=``, ``>`` or ``<``; "" when none follows."""
        token, _ = self._peek()
        if token in (_Token.END, _Token.COMMA):
            return ""
        token, literal = self._take()
        if token is not _Token.WORD:
            msg = f"found {_shown(literal)}, expected: identifier"
            raise SelectorError(msg)
        return literal
