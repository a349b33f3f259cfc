"""The package list, found: every package under host/ plus the two data packages that pyproject.toml
maps from the top-level firmware_templates/ and boards/ folders (everything else is in pyproject.toml)."""

from setuptools import find_packages, setup

setup(packages=find_packages("host") + ["zoflash.firmware_templates", "zoflash.board_files"])
