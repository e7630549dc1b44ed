"""The SpsProfile API (`sps.dev/v1alpha1`): pydantic models are the source of truth.

This module holds the root object, `SpsProfile`; its parts are in `api/spec.py`,
`api/job.py` and `api/status.py`, the rules and messages in `api/validation.py`. The CRD's
OpenAPI schema (`api/crd.py`), the reference docs (`docs/api.md`) and the operator's
parsing of live objects all come from these classes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from sps_operator.api import limits as L
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.api.status import SpsProfileStatus
from sps_operator.api.validation import MSG_PROFILE_NAME, cel_rule, check
from sps_operator.constants import API_GROUP, API_VERSION, KIND

API_VERSION_FULL = f"{API_GROUP}/{API_VERSION}"


# Rules at the root of the CRD schema, where CEL may read metadata.name.
ROOT_RULES: list[dict[str, str]] = [
    cel_rule(f"size(self.metadata.name) <= {L.MAX_PROFILE_NAME}", MSG_PROFILE_NAME)
]


class SpsProfile(BaseModel):
    """The whole object, for parsing (metadata stays a plain dict)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
    KIND: ClassVar[str] = KIND
    api_version: str = API_VERSION_FULL
    kind: str = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SpsProfileSpec
    status: SpsProfileStatus = Field(default_factory=SpsProfileStatus)

    @model_validator(mode="after")
    def _name(self) -> SpsProfile:
        check(len(str(self.metadata.get("name") or "")) <= L.MAX_PROFILE_NAME, MSG_PROFILE_NAME)
        return self
