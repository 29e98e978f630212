"""Stages as plain functions of plain arguments; ``workflow.run`` maps a Hydra config onto them."""
