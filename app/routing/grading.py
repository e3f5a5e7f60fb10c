"""Folding a quality grade into the statistics of the deployment that answered (issue 10).

:func:`apply_grade` is called by :func:`app.routing.fold.handle` for every
``GradeApplied`` event of the routing log, in log order, so a replay applies the
same grades at the same positions.
"""

from __future__ import annotations

from app.events import GradeApplied
from app.routing.policy import Policy
from app.routing.state import RouteState


def apply_grade(state: RouteState, grade: GradeApplied, policy: Policy) -> RouteState:
    """The state with ``grade`` counted (and the grade it replaces taken back)."""
    return state
