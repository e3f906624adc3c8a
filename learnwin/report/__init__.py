"""What a run tells its reader: the summary table, the claim verdicts and findings, number
formatting (docs/method.md §8b-9)."""
