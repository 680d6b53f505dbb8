"""Opt-in: the Ollama resource against a real server (set OLLAMA_HOST; OLLAMA_TEST_MODEL picks the model)."""

from __future__ import annotations

import json
import os

import pytest

from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.ollama_backend import OllamaResource

pytestmark = [
    pytest.mark.ollama_live,
    pytest.mark.skipif(
        not os.environ.get("OLLAMA_HOST"), reason="set OLLAMA_HOST to test against a real Ollama"
    ),
]


def test_real_ollama_summarizes_a_posting_as_schema_valid_json() -> None:
    model = os.environ.get("OLLAMA_TEST_MODEL", POSTING_SUMMARY.model)
    llm = OllamaResource(host=os.environ["OLLAMA_HOST"])
    prompt, system_prompt, _ = POSTING_SUMMARY.render(
        {
            "title": "Baker",
            "company": "Crumb",
            "location": "Leeds",
            "description": "Bake bread and pastries from 4 am; food hygiene certificate required.",
        }
    )
    generation = llm.generate(
        model, prompt, system_prompt, dict(POSTING_SUMMARY.output_schema), dict(POSTING_SUMMARY.options)
    )
    POSTING_SUMMARY.validate_output(json.loads(generation.text))
    assert llm.model_loads == 1 and generation.completion_tokens
