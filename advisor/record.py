"""Records: the frozen dataclasses that carry data from one stage to the next, and their JSON.

A record's fields hold JSON-shaped data only: ``str``, ``int``, ``float``, ``bool``, ``None``,
other records, ``tuple[X, ...]`` and ``Mapping[str, X]`` of them, ``Literal`` choices
(``tests/test_records.py`` checks that no field is ``Any``). :func:`dump` gives a record's JSON
object, :func:`load` reads one back: a missing key reads as the field's default, so files of
earlier versions (which lack the fields added since) load, and keys it does not know are
ignored (files of later versions); a value of another type, or a missing key of a field without
a default, is a :class:`RecordError` naming the key (``run.step_ms_median: expected float, got
'abc'``). So a field added later needs a default. ``load(..., lenient=True)`` reads a file other
code wrote (run.json): a value of another type reads as its field's default (absent), and an
item of a tuple or a mapping that does not fit is left out.

How a field is written is said once, where it is declared:

- ``name: X = default``: always written (``None`` as ``null``);
- ``name: X | None = omit_none()``: left out while ``None``;
- ``name: tuple[X, ...] = omit_empty()``: left out while empty;
- ``name: Record | None = flat()``: the nested record's keys stand in this object (left out
  while ``None``; read back when one of its keys is there); ``name: Mapping[str, X] = flat()``:
  every key of this object that no other field claims;
- ``name: X | Unset = omit_unset()``: left out while :data:`UNSET`, where a JSON ``null`` and
  a missing key say different things;
- ``renamed("key")``: written under another key (where the JSON key is a Python builtin);
  ``renamed("key", None, omit="none")`` also left out while ``None``;
- ``name: X = written_with("other", ...)``: written only while one of the named fields of the
  same record is set (not ``None``, not :data:`UNSET`): the keys a file holds only together
  with another (a section recorded whole or not at all, its anchor ``omit_none()``).

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
_WITH = "with"


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


def renamed(key: str, default: Any = dataclasses.MISSING, omit: str | None = None) -> Any:
    """A field written under ``key`` (a name Python code should not shadow, as ``min``);
    ``omit="none"`` leaves it out while None."""
    meta = {_KEY: key} if omit is None else {_KEY: key, _OMIT: omit}
    return dataclasses.field(default=default, metadata=meta)


def written_with(*anchors: str, default: Any = None) -> Any:
    """A field written only while one of ``anchors`` (fields of the same record) is set: keys
    that a file holds together with another or not at all."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("written_with: a mutable default")
    return dataclasses.field(default=default, metadata={_WITH: anchors})


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
            if f.anchors and all(getattr(value, a) in (None, UNSET) for a in f.anchors):
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


class RecordError(ValueError):
    """A JSON value that does not fit its record: where (``run.bound.by``) and what is wrong."""


def load(cls: type[R], data: object, where: str = "", lenient: bool = False) -> R:
    """A ``cls`` record from its JSON object. A missing key reads as the field's default (a
    file of an earlier version); a key present with a value of another type, or a missing key
    of a field without a default, raises :class:`RecordError` naming the key. With
    ``lenient``, a value of another type reads as the field's default (only a field without
    one raises), and a tuple's or a mapping's items that do not fit are left out."""
    if not isinstance(data, Mapping):
        raise RecordError(f"{where or cls.__name__}: expected an object, got {_show(data)}")
    kwargs: dict[str, Any] = {}
    plan = _fields(cls)  # type: ignore[arg-type]
    claimed = {k for f in plan for k in (f.sub_keys if f.flat else (f.key,))}
    for f in plan:
        at = f"{where}.{f.key}" if where else f.key
        if f.flat:
            if f.rest_of is not None:  # the open set of keys: those that fit
                vt = get_args(f.rest_of)[1]
                kwargs[f.name] = {
                    k: _convert(vt, v, at, lenient)
                    for k, v in data.items()
                    if k not in claimed and _fits(vt, v, lenient)
                }
            elif any(k in data for k in f.sub_keys):
                kwargs[f.name] = load(_record_of(f.type), data, where, lenient)  # type: ignore[arg-type]
        elif f.key in data:
            if not lenient or not f.has_default:
                kwargs[f.name] = _convert(f.type, data[f.key], at, lenient)
            elif _fits(f.type, data[f.key], lenient):  # else: absent, its default
                kwargs[f.name] = _convert(f.type, data[f.key], at, lenient)
        elif not f.has_default:
            raise RecordError(f"{at}: missing")
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
    anchors: tuple[str, ...]  # written only while one of these fields is set


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
                anchors=tuple(f.metadata.get(_WITH, ())),
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


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _fits(tp: Any, v: Any, lenient: bool = False) -> bool:
    try:
        _convert(tp, v, "", lenient)
    except RecordError:
        return False
    return True


def _convert(tp: Any, v: Any, where: str, lenient: bool = False) -> Any:
    """``v`` as a field of type ``tp`` holds it; :class:`RecordError` when it does not fit
    (``lenient``: a tuple's or a mapping's items that do not fit are left out)."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        if v is None and type(None) in get_args(tp):
            return None
        for arg in get_args(tp):
            if arg is not type(None) and arg is not Unset and _fits(arg, v, lenient):
                return _convert(arg, v, where, lenient)
    elif origin is Literal:
        if v in get_args(tp):
            return v
    elif origin is tuple:
        if isinstance(v, (list, tuple)):
            args = get_args(tp)
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(
                    _convert(args[0], x, f"{where}[{i}]", lenient)
                    for i, x in enumerate(v)
                    if not lenient or _fits(args[0], x, lenient)
                )
            if len(v) == len(args):
                return tuple(
                    _convert(a, x, f"{where}[{i}]", lenient)
                    for i, (a, x) in enumerate(zip(args, v, strict=True))
                )
    elif origin in (dict, Mapping):
        if isinstance(v, Mapping) and all(isinstance(k, str) for k in v):
            vt = get_args(tp)[1]
            return {
                k: _convert(vt, x, f"{where}.{k}", lenient)
                for k, x in v.items()
                if not lenient or _fits(vt, x, lenient)
            }
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return load(tp, v, where, lenient)
    elif tp is bool:
        if isinstance(v, bool):
            return v
    elif tp is int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    elif tp is float:  # an int is a float here (a JSON number written without a fraction)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
    elif tp is str:
        if isinstance(v, str):
            return v
    else:
        raise TypeError(f"a record field of type {tp!r} cannot be read from JSON")
    raise RecordError(f"{where}: expected {_type_name(tp)}, got {_show(v)}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
