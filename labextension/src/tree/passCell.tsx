/**
 * The graph column of a row inserted under a checkpoint (a fan-out group, one of its
 * children): the lanes leaving the checkpoint's row go straight on through it, and a
 * short branch from the checkpoint's lane marks what hangs off it.
 */

import * as React from 'react';

import { LANE_WIDTH, MAX_DRAWN_LANES } from './graph';
import { ITreeRow } from './layout';

/** Props of `PassCell`. */
export interface IPassCellProps {
  /** The checkpoint's row the inserted row hangs under. */
  row: ITreeRow;
  columns: number;
  height: number;
}

function x(column: number): number {
  return LANE_WIDTH / 2 + Math.min(column, MAX_DRAWN_LANES - 1) * LANE_WIDTH;
}

/** Lanes drawn on through an inserted row, and the branch mark. */
export function PassCell(props: IPassCellProps): JSX.Element {
  const { row, height } = props;
  const columns = Math.max(1, Math.min(props.columns, MAX_DRAWN_LANES));
  const width = columns * LANE_WIDTH;
  const cx = x(row.column);
  return (
    <svg
      className="jp-DittoGraph"
      width={width}
      height={height}
      viewBox={`0 0 ${width} ${height}`}
      aria-hidden="true"
      focusable="false"
    >
      {row.bottom.map((segment, i) => (
        <path
          key={i}
          d={`M ${x(segment.from)} 0 L ${x(segment.to)} ${height}`}
          className={`jp-DittoGraph-edge jp-DittoLane-${segment.from % 6}`}
        />
      ))}
      <path
        d={`M ${cx} 0 L ${cx + LANE_WIDTH / 2} ${height / 2}`}
        className="jp-DittoGraph-edge jp-DittoGraph-stub"
      />
    </svg>
  );
}
