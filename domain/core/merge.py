"""Merge strategies: what an upsert does when a subject that is already stored arrives again.

A strategy is a function `(stored, incoming) -> merged` over the subject's fields (`stored` is None
for a new subject). Built-ins: `replace` (the newest wins: the default, and what ingest always did),
`keep_first` (the first version stays), `append_lists` (list fields are joined without duplicates,
other fields as `replace`), and `merge_fields(rules)` with a rule per field. A user-supplied strategy is
any such function, named as ``package.module:function`` (`resolve_merge`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

Fields = Mapping[str, Any]
MergeStrategy = Callable[[Fields | None, Fields], dict[str, Any]]
FieldRule = Callable[[Any, Any], Any]


def replace(stored: Fields | None, incoming: Fields) -> dict[str, Any]:
    return dict(incoming)


def keep_first(stored: Fields | None, incoming: Fields) -> dict[str, Any]:
    return dict(stored) if stored is not None else dict(incoming)


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | tuple | dict) and not value)


def rule_new(old: Any, new: Any) -> Any:
    return new


def rule_first(old: Any, new: Any) -> Any:
    return old


def rule_first_non_empty(old: Any, new: Any) -> Any:
    return old if not _empty(old) else new


def rule_new_non_empty(old: Any, new: Any) -> Any:
    return new if not _empty(new) else old


def rule_longest(old: Any, new: Any) -> Any:
    return new if len(str(new or "")) > len(str(old or "")) else old


def rule_append(old: Any, new: Any) -> Any:
    """Lists: joined, duplicates dropped, order kept. Text: both kept (one paragraph each) unless one
    already contains the other."""
    if _empty(old):
        return new
    if _empty(new):
        return old
    if isinstance(old, list | tuple) or isinstance(new, list | tuple):
        joined: list[Any] = []
        for value in [*_as_list(old), *_as_list(new)]:
            if value not in joined:
                joined.append(value)
        return joined
    old_text, new_text = str(old), str(new)
    if new_text in old_text:
        return old
    if old_text in new_text:
        return new
    return f"{old_text}\n\n{new_text}"


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


FIELD_RULES: dict[str, FieldRule] = {
    "new": rule_new,
    "first": rule_first,
    "first_non_empty": rule_first_non_empty,
    "new_non_empty": rule_new_non_empty,
    "longest": rule_longest,
    "append": rule_append,
}


def merge_fields(
    rules: Mapping[str, str | FieldRule], default: str | FieldRule = "new_non_empty"
) -> MergeStrategy:
    """A strategy with a rule per field (a name from `FIELD_RULES` or a function `(old, new) -> value`);
    fields without a rule use `default` (the newer value unless it is empty)."""
    resolved = {name: _field_rule(rule) for name, rule in rules.items()}
    fallback = _field_rule(default)

    def merge(stored: Fields | None, incoming: Fields) -> dict[str, Any]:
        if stored is None:
            return dict(incoming)
        merged = dict(stored)
        for name in {*stored, *incoming}:
            rule = resolved.get(name, fallback)
            merged[name] = rule(stored.get(name), incoming.get(name))
        return merged

    return merge


def append_lists(stored: Fields | None, incoming: Fields) -> dict[str, Any]:
    if stored is None:
        return dict(incoming)
    merged = {**stored, **incoming}
    for name in {*stored, *incoming}:
        if isinstance(stored.get(name), list | tuple) or isinstance(incoming.get(name), list | tuple):
            merged[name] = rule_append(stored.get(name), incoming.get(name))
    return merged


def _field_rule(rule: str | FieldRule) -> FieldRule:
    if callable(rule):
        return rule
    if rule not in FIELD_RULES:
        raise ValueError(f"unknown field rule {rule!r}: one of {', '.join(FIELD_RULES)} or a function")
    return FIELD_RULES[rule]


BUILT_IN: dict[str, MergeStrategy] = {
    "replace": replace,
    "keep_first": keep_first,
    "append_lists": append_lists,
    "merge_fields": merge_fields({}),  # every field: the newer value unless it is empty
}


def resolve_merge(name: str) -> MergeStrategy:
    """A built-in strategy by name, or a user-supplied one as ``package.module:function``."""
    if name in BUILT_IN:
        return BUILT_IN[name]
    module_name, _, attribute = name.partition(":")
    if not attribute:
        raise ValueError(f"unknown merge strategy {name!r}: one of {', '.join(BUILT_IN)} or module:function")
    try:
        strategy = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load the merge strategy {name!r}: {exc}") from None
    if not callable(strategy):
        raise ValueError(f"the merge strategy {name!r} is not a function")
    return strategy
