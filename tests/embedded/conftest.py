"""sample_project/ is a user's project with tests of its own: test_sample_project.py runs
them in a virtualenv with Leveret installed; this suite does not collect them."""

collect_ignore = ["sample_project"]
