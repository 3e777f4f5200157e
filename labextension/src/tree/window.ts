/**
 * Which rows of a long list to put in the DOM: the ones in view, plus a margin.
 *
 * A runtime with 10,000 checkpoints is drawn with a few dozen row elements; scrolling
 * moves the window. Pure arithmetic, shared by the tree and tested on its own.
 */

/** Half-open range of row indexes [start, end). */
export interface IRowRange {
  start: number;
  end: number;
}

/**
 * The rows to render for a scroll position.
 *
 * @param scrollTop - pixels scrolled from the top of the list
 * @param viewport - height of the visible area in pixels
 * @param rowHeight - height of one row in pixels (every row has the same)
 * @param rowCount - number of rows in the list
 * @param overscan - rows rendered beyond each edge, so fast scrolling shows no gap
 */
export function visibleRows(
  scrollTop: number,
  viewport: number,
  rowHeight: number,
  rowCount: number,
  overscan = 8
): IRowRange {
  if (rowCount <= 0 || rowHeight <= 0) {
    return { start: 0, end: 0 };
  }
  const first = Math.floor(Math.max(0, scrollTop) / rowHeight);
  const inView = Math.ceil(Math.max(0, viewport) / rowHeight) + 1;
  const start = Math.max(0, Math.min(rowCount - 1, first - overscan));
  const end = Math.min(rowCount, first + inView + overscan);
  return { start, end: Math.max(start, end) };
}

/**
 * The scroll position that brings row `index` into view, or null when it already is.
 */
export function scrollToShow(
  index: number,
  scrollTop: number,
  viewport: number,
  rowHeight: number
): number | null {
  return scrollToReveal(index * rowHeight, rowHeight, scrollTop, viewport);
}

/**
 * The scroll position that brings a box (`top` and `height` in the scrolled content) into
 * view, its top first when it is taller than the view; null when it is in view already.
 */
export function scrollToReveal(
  top: number,
  height: number,
  scrollTop: number,
  viewport: number
): number | null {
  if (top < scrollTop || height >= viewport) {
    return top === scrollTop ? null : top;
  }
  if (top + height > scrollTop + viewport) {
    return Math.max(0, top + height - viewport);
  }
  return null;
}

/** Whether the scroll position is near enough the end to load the next page. */
export function nearEnd(
  scrollTop: number,
  viewport: number,
  rowHeight: number,
  rowCount: number,
  marginRows = 20
): boolean {
  return scrollTop + viewport >= (rowCount - marginRows) * rowHeight;
}
