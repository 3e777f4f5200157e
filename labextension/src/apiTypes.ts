/**
 * The shapes of the runtime API's answers and events (docs/rest.md), as the panel reads them.
 */

/** Where a runtime is in its life. */
export type RuntimeStatus = 'idle' | 'busy' | 'paused' | 'closed';

/** GET /api/v1/runtimes and /api/v1/runtimes/{runtime_id}. */
export interface IRuntimeRecord {
  runtime_id: string;
  /** The notebook path, as a rule. */
  conversation_id: string;
  sender_id: string;
  status: RuntimeStatus;
  created_at_ms: number;
  updated_at_ms: number;
}

/** A variable a checkpoint could not keep. */
export interface IUnrestorableValue {
  name: string;
  type: string;
  reason: string;
}

/** One row of a runtime's checkpoint listing. */
export interface ICheckpointSummary {
  checkpoint_id: string;
  runtime_id: string;
  parent_checkpoint_id: string | null;
  name: string | null;
  metadata: Record<string, unknown>;
  created_at_ms: number;
  bytes_written: number;
  has_provider_snapshot: boolean;
  unrestorable: IUnrestorableValue[];
}

/** GET /api/v1/runtimes/{runtime_id}/checkpoints (a page when the server pages). */
export interface ICheckpointPage {
  checkpoints: ICheckpointSummary[];
  /** Present when the server pages and more checkpoints follow. */
  next_cursor?: string | null;
}

/** GET .../checkpoints/{reference}. */
export interface ICheckpointDetail {
  checkpoint: ICheckpointSummary;
  context_manifest_id: string | null;
}

/** A runtime checked out from one of another runtime's checkpoints. */
export interface ICheckoutBranch {
  runtime_id: string;
  checkpoint_id: string;
  conversation_id: string;
  status: RuntimeStatus;
}

/** GET /api/v1/runtimes/{runtime_id}/lineage. */
export interface IRuntimeLineage {
  runtime_id: string;
  head: ICheckpointSummary | null;
  source: { runtime_id: string; checkpoint_id: string } | null;
  checkouts: ICheckoutBranch[];
}

export interface ICheckpointResult {
  checkpoint_id: string;
  runtime: IRuntimeRecord;
  previous_checkpoint_id: string | null;
}

export interface IRestoreResult {
  runtime: IRuntimeRecord;
  checkpoint_id: string;
  unrestorable: IUnrestorableValue[];
}

export interface ICheckoutResult {
  runtime: IRuntimeRecord;
  checkpoint_id: string;
  source_runtime_id: string;
  kernel_id: string | null;
  notebook_path: string | null;
  unrestorable?: IUnrestorableValue[];
}

export interface IPauseResult {
  runtime: IRuntimeRecord;
  checkpoint_id: string;
}

export interface IResumeResult {
  runtime: IRuntimeRecord;
  checkpoint_id: string;
  kernel_id: string | null;
  unrestorable?: IUnrestorableValue[];
}

export interface ICloseResult {
  runtime: IRuntimeRecord;
  backend_released: boolean;
  provider_sandbox_deleted: boolean;
}

export interface IDeleteSnapshotResult {
  checkpoint_id: string;
  deleted: boolean;
  already_deleted: boolean;
}

/** The schema id of the server's runtime events (server/events.py). */
export const RUNTIME_EVENT_SCHEMA_ID = 'https://events.ditto-jupyter.dev/ditto_jupyter/runtime/v1';

/** The actions a runtime event reports. */
export type RuntimeAction =
  | 'register'
  | 'checkpoint'
  | 'delete-snapshot'
  | 'prune'
  | 'checkout'
  | 'restore'
  | 'pause'
  | 'resume'
  | 'close'
  | 'lost';

/** One runtime event from /api/events/subscribe. */
export interface IRuntimeEvent {
  schema_id: string;
  action: RuntimeAction;
  runtime_id: string;
  checkpoint_id?: string | null;
  source_runtime_id?: string | null;
  status?: RuntimeStatus | null;
  duration_ms: number;
  ok: boolean;
  error?: string | null;
  /** Why a runtime paused (pause events): the idle pauser, or someone asked. */
  reason?: 'idle' | 'asked' | null;
}

/** Whether a message from the event stream is a runtime event. */
export function isRuntimeEvent(value: unknown): value is IRuntimeEvent {
  if (typeof value !== 'object' || value === null) {
    return false;
  }
  const record = value as Record<string, unknown>;
  return (
    record.schema_id === RUNTIME_EVENT_SCHEMA_ID &&
    typeof record.action === 'string' &&
    typeof record.runtime_id === 'string' &&
    typeof record.ok === 'boolean'
  );
}
