/**
 * The shapes of the issue 44 §3 answers the panel reads (docs/rest.md): the fan-out group
 * of a runtime made by a checkout of 2 or more, the comparison of 2 to 8 sides, and the
 * answer of "keep this branch".
 */

import { IDiffCell, IDiffFile, IFanOutMember, IVariable } from '../apiTypes';

/** The fan-out a runtime was made by: one id per checkout call, its place (0-based), its size. */
export type IFanout = IFanOutMember;

/** At most this many sides in one comparison (core/limits.py MAX_COMPARE_SIDES). */
export const MAX_COMPARE_SIDES = 8;

/** One side asked for: `at` is "live", a checkpoint reference, or null (live, else head). */
export interface ICompareSideRequest {
  runtime_id: string;
  at: string | null;
}

/** One side of a comparison of many, as the server resolved it. */
export interface ICompareSide {
  runtime_id: string;
  checkpoint_id: string | null;
  label: string;
}

/** A variable row: the variable on each side (null: not there). */
export interface ICompareVariableRow {
  name: string;
  values: (IVariable | null)[];
  same: boolean;
}

/** A file row. */
export interface ICompareFileRow {
  path: string;
  entries: (IDiffFile | null)[];
  same: boolean;
}

/** A cell row, by position. */
export interface ICompareCellRow {
  index: number;
  cells: (IDiffCell | null)[];
  same: boolean;
}

/** POST /api/v1/runtimes/compare. */
export interface IRuntimeCompareResult {
  sides: ICompareSide[];
  variables: { available: boolean[]; rows: ICompareVariableRow[] };
  files: { available: boolean[]; rows: ICompareFileRow[] };
  cells: { available: boolean[]; rows: ICompareCellRow[] };
}

/** A sibling that could not be closed. */
export interface IKeepFailure {
  runtime_id: string;
  error: string;
  message: string;
}

/** POST /api/v1/runtimes/{runtime_id}/keep. */
export interface IKeepResult {
  kept: string;
  closed: string[];
  failed: IKeepFailure[];
}
