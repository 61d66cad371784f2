"""The daemon: process lifecycle, the pass runner and its schedules."""
