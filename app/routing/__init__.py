"""The pure routing core: state, bandit maths, breaker, selection and the fold."""
