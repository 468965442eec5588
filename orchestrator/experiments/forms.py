from typing import Any

import yaml
from django import forms

from orchestrator.experiments.runconfig import ConfigError, validate_run_config


class ExperimentYamlForm(forms.Form):
    """Create an experiment from a RunConfig in YAML: the same file `python -m trainer` takes."""

    name = forms.RegexField(regex=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", max_length=200,
                            error_messages={"invalid": "letters, digits, '.', '_' and '-' only"})
    project = forms.CharField(max_length=100, initial="default")
    config_yaml = forms.CharField(widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false"}),
                                  label="Run config (YAML)", required=False)

    def clean_config_yaml(self) -> dict[str, Any]:
        text = self.cleaned_data["config_yaml"] or ""
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise forms.ValidationError(f"not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise forms.ValidationError("the config must be a mapping of sections")
        try:
            validate_run_config(data)
        except ConfigError as exc:
            raise forms.ValidationError([f"{e['field']}: {e['message']}" for e in exc.errors]) from None
        return data
