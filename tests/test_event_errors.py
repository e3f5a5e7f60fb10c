"""A validation error of an event never quotes its input: it would carry a prompt into
a log line or an error message."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from app.contract import ChatRequest, Dispatch, RequestAccepted

SECRET = "secret-prompt-text-0b9e"


@pytest.mark.parametrize("model", [ChatRequest, RequestAccepted, Dispatch])
def test_a_validation_error_names_fields_not_values(model: type[ChatRequest]) -> None:
    raw = json.dumps(
        {
            "request_id": 7,
            "messages": [{"role": "user", "content": SECRET}],
            "max_tokens": SECRET,
            "route": 1,
        }
    )
    with pytest.raises(ValidationError) as caught:
        model.model_validate_json(raw)
    assert SECRET not in str(caught.value)
    assert SECRET not in repr(caught.value.errors(include_input=False))
