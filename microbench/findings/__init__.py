"""The findings a trace or decompose report opens with: facts read from a trace analysis, one rule per finding,
their savings from the prediction estimate. Sits above the trace analysis and the prediction."""
