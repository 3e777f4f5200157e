/**
 * What the panel sends and reads of the issue 44 §3 routes beyond the answers' shapes
 * (apiTypes.ts): a fan-out member, the cap on the sides of one comparison, a side asked for.
 */

import { IFanOutMember } from '../apiTypes';

/** The fan-out a runtime was made by: one id per checkout call, its place (0-based), its size. */
export type IFanout = IFanOutMember;

/** At most this many sides in one comparison (core/limits.py MAX_COMPARE_SIDES). */
export const MAX_COMPARE_SIDES = 8;

/** One side asked for: `at` is "live", a checkpoint reference, or null (live, else head). */
export interface ICompareSideRequest {
  runtime_id: string;
  at: string | null;
}
