"""Replaying one side as a Beam job: the pipeline, its steps, the batch type, spills, runners."""
