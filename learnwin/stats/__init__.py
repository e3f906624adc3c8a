"""Statistics on the probe's tables: tail indices, envelope decay classes, the learnability window,
the claim checks and the ground truth of the window (docs/method.md §6-8, §10). Importing it loads
no torch; only ``groundtruth_job`` trains networks."""
