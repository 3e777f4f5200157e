/**
 * The graph column of one tree row: lanes, bends and the node, as a small SVG.
 *
 * Draws an `ITreeRow` of `layoutTree`; rows stacked without gaps join into the whole
 * graph. Colours come from CSS classes (`jp-DittoLane-N`), themed in style/base.css.
 */

import * as React from 'react';

import { ITreeRow } from './layout';

/** Horizontal distance between lanes, in pixels. */
export const LANE_WIDTH = 14;

/** Lanes drawn at most; further lanes are squeezed into the last one. */
export const MAX_DRAWN_LANES = 8;

/** Colours cycle through this many lane classes. */
const LANE_COLOURS = 6;

function x(column: number): number {
  return LANE_WIDTH / 2 + Math.min(column, MAX_DRAWN_LANES - 1) * LANE_WIDTH;
}

function laneClass(column: number): string {
  return `jp-DittoLane-${column % LANE_COLOURS}`;
}

/** Props of `GraphCell`. */
export interface IGraphCellProps {
  row: ITreeRow;
  /** Columns of the whole layout (the cell's width). */
  columns: number;
  /** Row height in pixels. */
  height: number;
  /** The node is the runtime's head. */
  head: boolean;
  /** Checkouts were made from the node. */
  branched: boolean;
}

/** One row's part of the graph. */
export function GraphCell(props: IGraphCellProps): JSX.Element {
  const { row, height, head, branched } = props;
  const columns = Math.max(1, Math.min(props.columns, MAX_DRAWN_LANES));
  const width = columns * LANE_WIDTH;
  const mid = height / 2;
  const paths: JSX.Element[] = [];
  row.top.forEach((segment, i) => {
    const x1 = x(segment.from);
    const x2 = x(segment.to);
    const d =
      x1 === x2
        ? `M ${x1} 0 L ${x2} ${mid}`
        : `M ${x1} 0 C ${x1} ${mid * 0.6}, ${x2} ${mid * 0.4}, ${x2} ${mid}`;
    paths.push(
      <path key={`t${i}`} d={d} className={`jp-DittoGraph-edge ${laneClass(segment.from)}`} />
    );
  });
  row.bottom.forEach((segment, i) => {
    const x1 = x(segment.from);
    paths.push(
      <path
        key={`b${i}`}
        d={`M ${x1} ${mid} L ${x(segment.to)} ${height}`}
        className={`jp-DittoGraph-edge ${laneClass(segment.from)}`}
      />
    );
  });
  const cx = x(row.column);
  if (row.danglingParent) {
    paths.push(
      <path
        key="stub"
        d={`M ${cx} ${mid} L ${cx} ${height - 2}`}
        className={`jp-DittoGraph-edge jp-DittoGraph-stub ${laneClass(row.column)}`}
      />
    );
  }
  return (
    <svg
      className="jp-DittoGraph"
      width={width}
      height={height}
      viewBox={`0 0 ${width} ${height}`}
      aria-hidden="true"
      focusable="false"
    >
      {paths}
      {branched ? (
        <circle
          cx={cx}
          cy={mid}
          r={7}
          className={`jp-DittoGraph-branchRing ${laneClass(row.column)}`}
        />
      ) : null}
      <circle
        cx={cx}
        cy={mid}
        r={head ? 5 : 4}
        className={`jp-DittoGraph-node ${laneClass(row.column)}${head ? ' jp-mod-head' : ''}`}
      />
    </svg>
  );
}
