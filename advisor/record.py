"""Records: the frozen dataclasses that carry data from one stage to the next, and their JSON.

A record's fields hold JSON-shaped data only: ``str``, ``int``, ``float``, ``bool``, ``None``,
other records, ``tuple[X, ...]`` and ``Mapping[str, X]`` of them, ``Literal`` choices
(``tests/test_records.py`` checks that no field is ``Any``). :func:`dump` gives a record's JSON
object, :func:`load` reads one back **leniently**: a missing key, or a value of another type,
gives the field's default (or the empty value of its type), so files written by earlier or
later versions, or edited by hand, still load.

How a field is written is said once, where it is declared:

- ``name: X = default``: always written (``None`` as ``null``);
- ``name: X | None = omit_none()``: left out while ``None``;
- ``name: tuple[X, ...] = omit_empty()``: left out while empty;
- ``name: Record | None = flat()``: the nested record's keys stand in this object (left out
  while ``None``; read back when one of its keys is there); ``name: Mapping[str, X] = flat()``:
  every key of this object that no other field claims;
- ``name: X | Unset = omit_unset()``: left out while :data:`UNSET`, where a JSON ``null`` and
  a missing key say different things;
- ``renamed("key")``: written under another key (where the JSON key is a Python builtin).

So a new field is one line in its record; its loader and writer need no change.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

R = TypeVar("R")


class Unset(enum.Enum):
    """The type of :data:`UNSET`: a field with no value at all (its key is left out)."""

    UNSET = "unset"


UNSET = Unset.UNSET

_OMIT = "omit"  # metadata keys
_FLAT = "flat"
_KEY = "key"


def omit_none(default: Any = None) -> Any:
    """A field left out of the JSON while it is None."""
    return dataclasses.field(default=default, metadata={_OMIT: "none"})


def omit_empty(default: Any = ()) -> Any:
    """A field left out of the JSON while it is empty (or None)."""
    return dataclasses.field(default=default, metadata={_OMIT: "empty"})


def omit_unset() -> Any:
    """A field left out of the JSON while it is :data:`UNSET` (its default)."""
    return dataclasses.field(default=UNSET, metadata={_OMIT: "unset"})


def flat(mapping: bool = False) -> Any:
    """A nested record (default None) or, with ``mapping``, a mapping (default empty) whose
    keys stand in the parent's JSON object."""
    if mapping:
        return dataclasses.field(default_factory=dict, metadata={_FLAT: True})
    return dataclasses.field(default=None, metadata={_FLAT: True})


def renamed(key: str, default: Any = dataclasses.MISSING) -> Any:
    """A field written under ``key`` (a name Python code should not shadow, as ``min``)."""
    return dataclasses.field(default=default, metadata={_KEY: key})


# ---------------------------------------------------------------- writing


def dump(value: Any) -> Any:
    """The JSON form of a record (records to objects, tuples to arrays, mappings to objects;
    everything else as it is)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in _fields(type(value)):
            v = getattr(value, f.name)
            if f.omit == "none" and v is None:
                continue
            if f.omit == "unset" and v is UNSET:
                continue
            if f.omit == "empty" and (v is None or not len(v)):
                continue
            if f.flat:
                if v is not None:
                    out.update(dump(v))
                continue
            out[f.key] = dump(v)
        return out
    if isinstance(value, (tuple, list)):
        return [dump(x) for x in value]
    if isinstance(value, Mapping):
        return {k: dump(x) for k, x in value.items()}
    return value


# ---------------------------------------------------------------- reading


def load(cls: type[R], data: object) -> R:
    """A ``cls`` record from its JSON object (anything else reads as an empty object)."""
    d: Mapping[str, Any] = data if isinstance(data, Mapping) else {}
    kwargs: dict[str, Any] = {}
    plan = _fields(cls)  # type: ignore[arg-type]
    claimed = {k for f in plan for k in (f.sub_keys if f.flat else (f.key,))}
    for f in plan:
        if f.flat:
            if f.rest_of is not None:
                rest = {k: v for k, v in d.items() if k not in claimed}
                kwargs[f.name] = _convert(f.type, rest)[1]
            elif any(k in d for k in f.sub_keys):
                kwargs[f.name] = load(_record_of(f.type), d)  # type: ignore[arg-type]
            continue
        if f.key in d:
            ok, v = _convert(f.type, d[f.key])
            if ok:
                kwargs[f.name] = v
                continue
        if not f.has_default:
            kwargs[f.name] = _empty(f.type)
    return cls(**kwargs)


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    type: Any
    omit: str | None
    flat: bool
    has_default: bool
    sub_keys: tuple[str, ...]  # flat record: the keys that say it is there
    rest_of: Any  # flat mapping: its value type


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    """How each field of ``cls`` is written and read (from its declaration; computed once per
    class: code, not data)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        is_flat = bool(f.metadata.get(_FLAT))
        sub: tuple[str, ...] = ()
        rest = None
        if is_flat:
            rec = _record_of(tp)
            if rec is not None:
                sub = tuple(g.key for g in _fields(rec) if not g.flat)
            else:
                rest = tp
        out.append(
            _Field(
                name=f.name,
                key=str(f.metadata.get(_KEY, f.name)),
                type=tp,
                omit=f.metadata.get(_OMIT),
                flat=is_flat,
                has_default=f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING,
                sub_keys=sub,
                rest_of=rest,
            )
        )
    return tuple(out)


def _record_of(tp: Any) -> type | None:
    """The record class of ``tp`` (``Record`` or ``Record | None``), else None."""
    for t in (tp, *_union_args(tp)):
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            return t
    return None


def _union_args(tp: Any) -> tuple[Any, ...]:
    return get_args(tp) if get_origin(tp) in (Union, types.UnionType) else ()


def _convert(tp: Any, v: Any) -> tuple[bool, Any]:
    """(whether ``v`` fits type ``tp``, the value as ``tp`` holds it)."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        if v is None:
            return type(None) in get_args(tp), None
        for arg in get_args(tp):
            if arg is not type(None) and arg is not Unset:
                ok, out = _convert(arg, v)
                if ok:
                    return True, out
        return False, None
    if origin is Literal:
        return v in get_args(tp), v
    if origin is tuple:
        if not isinstance(v, (list, tuple)):
            return False, None
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]: items that fit
            items = [_convert(args[0], x) for x in v]
            return True, tuple(x for ok, x in items if ok)
        if len(v) != len(args):
            return False, None
        items = [_convert(a, x) for a, x in zip(args, v, strict=True)]
        return all(ok for ok, _ in items), tuple(x for _, x in items)
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        if not isinstance(v, Mapping):
            return False, None
        vt = get_args(tp)[1]
        out = {}
        for k, x in v.items():
            ok, y = _convert(vt, x)
            if ok and isinstance(k, str):
                out[k] = y
        return True, out
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return isinstance(v, Mapping), load(tp, v) if isinstance(v, Mapping) else None
    if tp is bool:
        return isinstance(v, bool), v
    if tp is int:
        return isinstance(v, int) and not isinstance(v, bool), v
    if tp is float:  # an int is a float here (a JSON number written without a fraction)
        return isinstance(v, (int, float)) and not isinstance(v, bool), v
    if tp is str:
        return isinstance(v, str), v
    raise TypeError(f"a record field of type {tp!r} cannot be read from JSON")


def _empty(tp: Any) -> Any:
    """The value a required field gets when its key is missing or unreadable."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType) and type(None) in get_args(tp):
        return None
    if origin is Literal:
        return get_args(tp)[0]
    if origin is tuple:
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return ()
        return tuple(_empty(a) for a in args)
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        return {}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return load(tp, {})
    return {bool: False, int: 0, float: 0.0, str: ""}.get(tp)
