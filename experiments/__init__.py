"""The paper's experiments: tables, figures, the budget study, the side-by-side with the published code."""
