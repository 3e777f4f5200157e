/**
 * A long list of same-height rows, of which only those in view (plus a margin) are in the
 * DOM: the Compare view's thousands of variables and files, a checkpoint's variables.
 * The window arithmetic is the tree's (tree/window.ts).
 */

import * as React from 'react';

import { visibleRows } from '../tree/window';

/** Props of `VirtualList`. */
export interface IVirtualListProps {
  count: number;
  rowHeight: number;
  /** Draws row `index`, absolutely placed at `style` (its top and height). */
  renderRow: (index: number, style: React.CSSProperties) => JSX.Element | null;
  /** Height of the list in pixels; without it the list fills its parent and measures it. */
  height?: number;
  className?: string;
  role?: string;
  ariaLabel?: string;
}

/** Rows assumed in view before the list has measured itself. */
const FIRST_GUESS_ROWS = 40;

/** A windowed list. */
export function VirtualList(props: IVirtualListProps): JSX.Element {
  const { count, rowHeight, renderRow, height } = props;
  const scroller = React.useRef<HTMLDivElement>(null);
  const [scrollTop, setScrollTop] = React.useState(0);
  const [measured, setMeasured] = React.useState<number | null>(null);

  React.useEffect(() => {
    const node = scroller.current;
    if (height !== undefined || !node || typeof ResizeObserver === 'undefined') {
      return;
    }
    // The observer reports the first size as soon as it observes.
    const observer = new ResizeObserver(() => setMeasured(node.clientHeight));
    observer.observe(node);
    return () => observer.disconnect();
  }, [height]);

  const viewport = height ?? (measured || FIRST_GUESS_ROWS * rowHeight);
  const range = visibleRows(scrollTop, viewport, rowHeight, count);
  const rows: JSX.Element[] = [];
  for (let index = range.start; index < range.end; index++) {
    const row = renderRow(index, { top: index * rowHeight, height: rowHeight });
    if (row) {
      rows.push(row);
    }
  }
  return (
    <div
      ref={scroller}
      className={`jp-DittoVirtualList${props.className ? ` ${props.className}` : ''}`}
      role={props.role}
      aria-label={props.ariaLabel}
      style={height !== undefined ? { height } : undefined}
      onScroll={event => setScrollTop(event.currentTarget.scrollTop)}
    >
      <div className="jp-DittoVirtualList-canvas" style={{ height: count * rowHeight }}>
        {rows}
      </div>
    </div>
  );
}
