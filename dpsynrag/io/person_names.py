"""Public lists of given names and surnames (Faker's person providers, every locale).

Facts mode reads them to tell a person's name from a title of ordinary words: "Oskar
Lachance" and "John Smith" are people, "Quiet Ribbon" and "Silver Feathers" are not
(``facts.terms``, rule 5). They are public data shipped with a package, never derived from
the documents; nothing here reads or logs private text.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

__all__ = ["given_names", "surnames"]

_GIVEN_ATTRIBUTES = ("first_names", "first_names_male", "first_names_female",
                     "first_names_nonbinary")


@functools.cache
def _lists() -> tuple[frozenset[str], frozenset[str]]:
    try:
        import faker.providers.person as person
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("facts mode needs the 'faker' package for its public name lists "
                          "(pip install faker)") from error
    given: set[str] = set()
    family: set[str] = set()
    for module in pkgutil.iter_modules(person.__path__):
        provider = importlib.import_module(f"{person.__name__}.{module.name}").Provider
        for attribute in (*_GIVEN_ATTRIBUTES, "last_names"):
            value = next((base.__dict__[attribute] for base in provider.__mro__
                          if attribute in base.__dict__), None)
            if value is None or isinstance(value, property):
                continue
            target = family if attribute == "last_names" else given
            target.update(_canonical(name) for name in value if isinstance(name, str))
    given.discard("")
    family.discard("")
    return frozenset(given), frozenset(family)


def _canonical(name: str) -> str:
    name = name.strip().lower()
    return name if name.replace("-", "").replace("'", "").isalpha() else ""


def given_names() -> frozenset[str]:
    """Lowercase given names of every locale Faker ships (public)."""
    return _lists()[0]


def surnames() -> frozenset[str]:
    """Lowercase surnames of every locale Faker ships (public)."""
    return _lists()[1]
