"""Merge strategies on upsert (domain/core/merge.py): built-ins, per-field rules, a user-supplied one."""

from __future__ import annotations

import pytest

from domain.core.merge import append_lists, keep_first, merge_fields, replace, resolve_merge

STORED = {"key": "k", "title": "Nurse", "company": "Northgate", "location": None, "tags": ["care"]}
INCOMING = {"key": "k", "title": "Registered Nurse", "company": None, "location": "Leeds", "tags": ["nights"]}


def test_replace_and_keep_first() -> None:
    assert replace(STORED, INCOMING) == INCOMING
    assert keep_first(STORED, INCOMING) == STORED
    assert keep_first(None, INCOMING) == INCOMING


def test_merge_fields_follows_each_fields_rule_and_loses_nothing_by_default() -> None:
    merged = merge_fields({"title": "longest", "tags": "append"})(STORED, INCOMING)
    assert merged == {
        "key": "k",
        "title": "Registered Nurse",
        "company": "Northgate",  # the newer value is empty: the stored one stays
        "location": "Leeds",
        "tags": ["care", "nights"],
    }


def test_append_lists_joins_lists_without_duplicates() -> None:
    merged = append_lists({"tags": ["a", "b"], "n": 1}, {"tags": ["b", "c"], "n": 2})
    assert merged == {"tags": ["a", "b", "c"], "n": 2}


def test_append_rule_keeps_both_texts_once() -> None:
    merge = merge_fields({"description": "append"})
    assert merge({"description": "A."}, {"description": "B."})["description"] == "A.\n\nB."
    assert merge({"description": "A. B."}, {"description": "B."})["description"] == "A. B."


def test_a_user_supplied_strategy_is_named_module_colon_function() -> None:
    assert resolve_merge("domain.core.merge:keep_first") is keep_first
    assert resolve_merge("keep_first") is keep_first
    with pytest.raises(ValueError, match="unknown merge strategy"):
        resolve_merge("newest")
    with pytest.raises(ValueError, match="cannot load"):
        resolve_merge("no.such.module:f")
    with pytest.raises(ValueError, match="unknown field rule"):
        merge_fields({"title": "biggest"})
