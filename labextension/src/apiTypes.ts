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
  /**
   * The fan-out (a checkout of 2 or more) this child was made by; null otherwise (absent
   * from older servers).
   */
  fanout?: IFanOutMember | null;
}

/** A child's fan-out: the fan-out's id (one per checkout call), its index, the count. */
export interface IFanOutMember {
  id: string;
  index: number;
  size: number;
}

/** A variable a checkpoint could not keep. */
export interface IUnrestorableValue {
  name: string;
  type: string;
  reason: string;
}

/** Where a checkpoint's notebook document came from (issue 23). */
export type DocumentSource = 'front_end' | 'saved_file' | 'request' | 'none' | 'pending';

/** What a checkpoint summary says of its notebook document. */
export interface ICheckpointDocumentInfo {
  source: DocumentSource;
  /** Cells of the stored document; null while pending or when there is none. */
  cells: number | null;
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
  /** Absent from servers older than issue 23. */
  document?: ICheckpointDocumentInfo;
  /** The cell `%autocheckpoint` took it after; null for a checkpoint on request. */
  automatic?: IExecutedCell | null;
  /** A prune dropped its variables and workspace snapshot: it cannot be restored. */
  pruned?: boolean;
  /** With an object store: 'local' (still uploading) or 'replicated'; null without one. */
  replication?: 'local' | 'replicated' | null;
}

/** A cell the kernel ran: the one an automatic checkpoint followed, or the one undone. */
export interface IExecutedCell {
  execution_count: number;
  source: string;
  failed?: boolean;
  /** A cell before it whose checkpoint was not recorded: undo cannot undo this one alone. */
  unrecorded_before?: number | null;
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
  fanout?: IFanOutMember | null;
}

/** GET /api/v1/runtimes/{runtime_id}/lineage. */
export interface IRuntimeLineage {
  runtime_id: string;
  head: ICheckpointSummary | null;
  source: { runtime_id: string; checkpoint_id: string } | null;
  checkouts: ICheckoutBranch[];
}

/**
 * A notebook document: nbformat 4 JSON, as JupyterLab's model gives it (`toJSON()`) and
 * as the server stores it. Only the parts the panel reads are typed.
 */
export interface INotebookDocument {
  cells: INotebookCell[];
  metadata: Record<string, unknown>;
  nbformat: number;
  nbformat_minor: number;
}

/** One cell of a notebook document. */
export interface INotebookCell {
  cell_type: string;
  source: string | string[];
  id?: string;
  metadata?: Record<string, unknown>;
  execution_count?: number | null;
  outputs?: unknown[];
  attachments?: unknown;
}

/** A variable of a checkpoint, as the kernel described it at capture time. */
export interface IVariable {
  name: string;
  /** The qualified type name. */
  type: string;
  /** Shape and dtype, shape and columns, a length, or a short repr. */
  summary: string;
  size: number | null;
  /** False: it could not be kept (see `reason`). */
  kept: boolean;
  reason?: string | null;
  /** A hash of its kept bytes: a value edited in place changes it, not its summary. */
  digest?: string | null;
}

/** GET .../checkpoints/{reference}/contents. */
export interface ICheckpointContents {
  checkpoint_id: string;
  variables: IVariable[];
  /** Null when the backend cannot say (an E2B snapshot, a deleted or pruned one). */
  files: { count: number | null; bytes: number | null };
  document: { cells: number } | null;
}

/** A workspace file in a comparison. */
export interface IDiffFile {
  path: string;
  size: number | null;
  kind: 'file' | 'dir' | 'symlink';
}

/** A cell in a comparison. */
export interface IDiffCell {
  index: number;
  cell_type: string;
  source: string;
  execution_count: number | null;
  /** How many outputs it has. */
  outputs: number;
}

/** One side of a comparison: a checkpoint, or the live kernel (checkpoint_id null). */
export interface IDiffSide {
  checkpoint_id: string | null;
  label: string;
}

/** POST /api/v1/runtimes/diff. */
export interface IDiffResult {
  from: IDiffSide;
  to: IDiffSide;
  variables: {
    added: IVariable[];
    removed: IVariable[];
    changed: { name: string; old: IVariable; new: IVariable }[];
    unchanged: number;
    /** False when a side holds no variables to compare (a pruned checkpoint). */
    available?: boolean;
  };
  files: {
    added: IDiffFile[];
    removed: IDiffFile[];
    changed: { path: string; old: IDiffFile; new: IDiffFile; text_diff: string | null }[];
    unchanged: number;
    /** False when a side's files cannot be read (an E2B snapshot, a deleted snapshot). */
    available?: boolean;
  };
  cells: {
    added: IDiffCell[];
    removed: IDiffCell[];
    changed: {
      index_old: number;
      index_new: number;
      source_diff: string | null;
      outputs_changed: boolean;
      old: IDiffCell;
      new: IDiffCell;
    }[];
    unchanged: number;
    /** False when either side holds no document. */
    available: boolean;
    /** How the two documents' cells were paired (absent from older servers). */
    aligned_by?: 'ids' | 'nbdime' | 'sources' | 'order' | null;
    /** A sentence to show above the cells when the comparison needs one (else null). */
    note?: string | null;
  };
}

/** The live kernel (and the live document) as a side of a comparison. */
export const LIVE = 'live';

/** One side of a compare (POST /api/v1/runtimes/compare): a runtime, its checkpoint. */
export interface ICompareSide {
  runtime_id: string;
  /** Null: the live runtime. */
  checkpoint_id: string | null;
  label: string;
}

/**
 * POST /api/v1/runtimes/compare: 2 to 8 sides side by side. Each row holds one value per
 * side, in the sides' order (null where a side holds none); `same` when every available
 * side holds it, all alike. `available[i]` is false when side i cannot show that part.
 */
export interface ICompareResult {
  sides: ICompareSide[];
  variables: {
    available: boolean[];
    rows: { name: string; values: (IVariable | null)[]; same: boolean }[];
  };
  files: {
    available: boolean[];
    rows: { path: string; entries: (IDiffFile | null)[]; same: boolean }[];
  };
  cells: {
    available: boolean[];
    rows: { index: number; cells: (IDiffCell | null)[]; same: boolean }[];
  };
}

/** POST /api/v1/runtimes/{runtime_id}/keep: the siblings closed, or why not. */
export interface IKeepResult {
  kept: string;
  closed: string[];
  failed: { runtime_id: string; error: string; message: string }[];
}

/** POST /api/v1/runtimes/undo. */
export interface IUndoResult {
  runtime: IRuntimeRecord;
  checkpoint_id: string;
  undone_cell: IExecutedCell;
  unrestorable: IUnrestorableValue[];
}

export interface ICheckpointResult {
  checkpoint_id: string;
  runtime: IRuntimeRecord;
  previous_checkpoint_id: string | null;
  bytes_written?: number;
}

export interface IRestoreResult {
  runtime: IRuntimeRecord;
  checkpoint_id: string;
  unrestorable: IUnrestorableValue[];
  /**
   * Cells of the checkpoint's document that differ from the document the request carried;
   * null (or absent, from older servers) when unknown.
   */
  cells_changed?: number | null;
  /** A sentence on the cells to show with the restore (else null or absent). */
  cells_note?: string | null;
}

export interface ICheckoutResult {
  runtime: IRuntimeRecord;
  checkpoint_id: string;
  source_runtime_id: string;
  kernel_id: string | null;
  notebook_path: string | null;
  unrestorable?: IUnrestorableValue[];
  /** "checkpoint": written from its document; "current_file": it had none, today's file was copied. */
  notebook_source?: 'checkpoint' | 'current_file' | null;
  /** With "current_file": the sentence saying so. */
  notebook_note?: string | null;
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
  /** The final checkpoint close took (null: paused already, or discarded). */
  checkpoint_id?: string | null;
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
  | 'lost'
  | 'undo'
  | 'document';

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
  /**
   * Checkpoint events: "pending" while the server waits for the front end's document
   * (answer with POST checkpoint/document), else where the recorded one came from.
   */
  document?: DocumentSource | null;
  /** Checkout events of a fan-out (one per child): the child's fan-out. */
  fanout?: IFanOutMember | null;
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
