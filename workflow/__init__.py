"""The experiment pipeline: stages as plain functions (workflow.stages), one Hydra entry (workflow.run),
Snakemake rules (workflow/rules) and the report (workflow.report)."""
