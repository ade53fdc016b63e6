"""The status page's panels as the browser tests fill and measure them."""

from __future__ import annotations

WIDTH = 1400
"""CSS pixels: two charts a row."""

# Each panel in the DOM: its state, the points its chart drew and the table cells with a value.
PANEL_DATA = """JSON.stringify([...document.querySelectorAll("section.panel")].map((s) => ({
  name: s.dataset.panel,
  state: s.dataset.state,
  points: [...s.querySelectorAll("path")].map((p) => (p.getAttribute("d").match(/[ML]/g) || []).length)
    .reduce((a, b) => a + b, 0),
  cells: [...s.querySelectorAll("td:not(.label)")].filter((td) => td.textContent !== "–").length,
  text: s.innerText.slice(0, 400),
})))"""
