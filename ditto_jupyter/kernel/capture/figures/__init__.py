"""matplotlib's figures in a capture: the room where the capture's knowledge of them lives.

- `pyplot_state`: pyplot's open figures, their numbers and the current one, recorded under
  `PYPLOT_FIGURES` and put back on restore;
- `pods`: each open figure pickled in a stream of its own, which other streams refer into,
  so an unchanged figure is kept as stored;
- `figure_watch`: which figures changed since a capture (matplotlib's stale marks);
- `pyplot_access`: which figures pyplot handed to a cell's code (`plt.gca()`, `df.plot()`).

The hooks the last two put into matplotlib are put in and taken out by `kernel_hooks`.
These modules were `ditto_jupyter.kernel.capture.<name>`: the capture package keeps those
dotted names importable (`capture.__init__`).
"""
