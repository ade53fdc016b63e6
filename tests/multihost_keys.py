"""The API key the multi-host engine runs put their load under."""

from __future__ import annotations

API_KEY = "sk-multihost-97b4f1e3ef97eef652"
