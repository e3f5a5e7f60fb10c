"""Quality grades: feedback on answers, matched to what it grades, and the built-in judge.

* :mod:`~app.grades.intake`: one raw ``llm.feedback`` record, validated or refused.
* :mod:`~app.grades.matching`: a feedback matched to the answer it grades.
* :mod:`~app.grades.judge`: which answers the judge grades, its request, its score.

How a grade moves routing is the core's (:mod:`app.routing.grading`).
"""
