"""Settings of the wrong type or out of range, found before jupyter-server applies them.

traitlets raises `TraitError` when a config value does not fit its trait (a word where a
number goes, a value below a minimum, a choice that is not one of the choices).
jupyter-server then leaves the whole extension out: every ditto route answers a 404 page
and its idle culler kills kernels that should have been paused (issue 40, item 6). Each
value of the app's own config section is tried here first; a value that does not fit is
dropped from the config, so the extension links with its default, and its one line is
returned for the app to answer every route with 503 `ConfigurationError`.
"""

from __future__ import annotations

from typing import Any

from traitlets import HasTraits, TraitError
from traitlets.config.loader import Config, DeferredConfigString, LazyConfigValue


def setting_error_line(owner: str, name: str, error: TraitError) -> str:
    """One line naming the setting and what is wrong with its value."""
    said = " ".join(str(error).split())
    return f"{owner}.{name}: {said}"


def drop_bad_settings(app: HasTraits, config: Config) -> list[str]:
    """Try every value the config gives `app`'s class; drop each that does not fit and
    return its line (none: every value fits)."""
    owner = type(app).__name__
    if owner not in config:
        return []
    section = config[owner]
    traits = app.traits(config=True)
    lines = []
    for name in list(section.keys()):
        trait = traits.get(name)
        value: Any = section[name]
        if trait is None or isinstance(value, LazyConfigValue):
            continue  # unknown names: traitlets warns; `+=` values: applied as they are
        try:
            if isinstance(value, DeferredConfigString):
                value = value.get_value(trait)
            setattr(app, name, value)
        except TraitError as error:
            lines.append(setting_error_line(owner, name, error))
            del section[name]
    return lines
