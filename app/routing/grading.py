"""Folding a quality grade into the statistics of the deployment that answered.

:func:`apply_grade` is called by :func:`app.routing.fold.handle` for every
``GradeApplied`` event of the routing log, in log order, so a replay applies the
same grades at the same positions.

The grade joins the answering deployment's grade sums in every bucket of the
answer's context (``GradeApplied.context``, the decision's; ``*`` only without
one); a grade that replaces an earlier one from the same source for the same
request takes the earlier one back (``replaces_score``/``replaces_weight``), so
the answer counts once, with its latest grade. Availability (breaker,
reliability accounting, the reward sums) is left as it is: quality is a
separate signal. A grade for a deployment the route no longer has is still
kept (its statistics wait in the row like any other arm's).

A grade is counted once per id: the feedback matcher re-sends the same record
(same id) when it crashed between the broker's ack and its own row write, so
the route remembers the ids of its last ``RECENT_GRADES`` grades and drops a
grade it has already folded (a re-send comes within seconds; a route taking
more than that many grades in between would count it twice).
"""

from __future__ import annotations

from dataclasses import replace

from app.contract import GradeApplied
from app.routing.evidence import observe_grade
from app.routing.policy import Policy
from app.routing.state import RECENT_GRADES, RouteState


def apply_grade(state: RouteState, grade: GradeApplied, policy: Policy) -> RouteState | None:
    """The state with ``grade`` counted (and the grade it replaces taken back); None when
    this grade (its id) was folded already."""
    if grade.id in state.recent_grades:
        return None
    arm = state.arm(grade.deployment)
    graded = replace(arm, evidence=observe_grade(arm.evidence, grade, policy))
    recent = [*state.recent_grades[-(RECENT_GRADES - 1) :], grade.id]
    arms = {**state.arms, grade.deployment: graded}
    return replace(state, arms=arms, recent_grades=recent)
