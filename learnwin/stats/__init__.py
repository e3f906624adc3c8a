"""Statistics on the probe's tables: tail indices, envelope decay classes, the learnability window,
the claim checks and the direct measurement of the window (docs/method.md §6-8). Importing it loads
no torch; only ``recovery_job`` trains networks."""
