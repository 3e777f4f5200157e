/**
 * The runtime API's client: every request goes through `ServerConnection`, so the token,
 * the XSRF cookie and the server's base_url are handled the way JupyterLab handles them.
 *
 * An error answer `{"error": code, "message": ...}` becomes a `DittoApiError` whose text
 * is `Code: message`, the one sentence the panel shows.
 */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  ICheckoutResult,
  ICheckpointContents,
  ICheckpointDetail,
  ICheckpointPage,
  ICheckpointResult,
  ICloseResult,
  IDeleteSnapshotResult,
  ICompareResult,
  IDiffResult,
  IKeepResult,
  INotebookDocument,
  IPauseResult,
  IRestoreResult,
  IResumeResult,
  IRuntimeLineage,
  IRuntimeRecord,
  IUndoResult
} from './apiTypes';
import { ICompareSideRequest } from './branches/branchTypes';

/** The prefix of every route, below the server's base_url. */
export const API_PREFIX = 'api/v1/runtimes';

/** A failed request: the server's error code and its one-sentence message. */
export class DittoApiError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status: number
  ) {
    super(`${code}: ${message}`);
    this.name = 'DittoApiError';
  }
}

/** The text to show for any error a request raised. */
export function errorText(error: unknown): string {
  if (error instanceof DittoApiError) {
    return error.message;
  }
  if (error instanceof ServerConnection.NetworkError) {
    return `NetworkError: ${error.message}`;
  }
  if (error instanceof Error) {
    return `${error.name}: ${error.message}`;
  }
  return String(error);
}

/** Paging of a checkpoint listing. */
export interface IPageRequest {
  limit?: number;
  cursor?: string | null;
}

/** Calls the runtime API of the server JupyterLab talks to. */
export class RuntimeApi {
  constructor(
    readonly serverSettings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ) {}

  listRuntimes(): Promise<{ runtimes: IRuntimeRecord[] }> {
    return this.request('GET', '');
  }

  getRuntime(runtimeId: string): Promise<IRuntimeRecord> {
    return this.request('GET', enc(runtimeId));
  }

  /**
   * One page of a runtime's checkpoints. `limit` and `cursor` are sent as query
   * parameters; a server that does not page answers with every checkpoint and no
   * `next_cursor`.
   */
  listCheckpoints(runtimeId: string, page: IPageRequest = {}): Promise<ICheckpointPage> {
    const query: Record<string, string> = {};
    if (page.limit !== undefined) {
      query.limit = String(page.limit);
    }
    if (page.cursor) {
      query.cursor = page.cursor;
    }
    return this.request('GET', `${enc(runtimeId)}/checkpoints`, undefined, query);
  }

  getCheckpoint(runtimeId: string, reference: string): Promise<ICheckpointDetail> {
    return this.request('GET', `${enc(runtimeId)}/checkpoints/${enc(reference)}`);
  }

  lineage(runtimeId: string): Promise<IRuntimeLineage> {
    return this.request('GET', `${enc(runtimeId)}/lineage`);
  }

  /** What a checkpoint holds: its variables, its files' count and bytes, its cells. */
  contents(runtimeId: string, reference: string): Promise<ICheckpointContents> {
    return this.request('GET', `${enc(runtimeId)}/checkpoints/${enc(reference)}/contents`);
  }

  /** The checkpoint's stored notebook document (CheckpointNotFound when it holds none). */
  document(runtimeId: string, reference: string): Promise<INotebookDocument> {
    return this.request('GET', `${enc(runtimeId)}/checkpoints/${enc(reference)}/document`);
  }

  /**
   * Checkpoint a runtime; `document` is the notebook as the user sees it (unsaved edits
   * included), which the checkpoint then holds.
   */
  checkpoint(
    runtimeId: string,
    name?: string,
    document?: INotebookDocument | null
  ): Promise<ICheckpointResult> {
    const body: Record<string, unknown> = { runtime_id: runtimeId };
    if (name) {
      body.name = name;
    }
    if (document) {
      body.document = document;
    }
    return this.request('POST', 'checkpoint', body);
  }

  /** Answer a checkpoint event whose document is pending with the open notebook's. */
  submitDocument(
    runtimeId: string,
    checkpointId: string,
    document: INotebookDocument
  ): Promise<unknown> {
    return this.request('POST', 'checkpoint/document', {
      runtime_id: runtimeId,
      checkpoint_id: checkpointId,
      document
    });
  }

  /**
   * Restore a checkpoint in place; with `document` (the open notebook's), the answer
   * says how many of the checkpoint's cells differ from it.
   */
  restore(
    runtimeId: string,
    checkpointId: string,
    document?: INotebookDocument | null
  ): Promise<IRestoreResult> {
    const body: Record<string, unknown> = { runtime_id: runtimeId, checkpoint_id: checkpointId };
    if (document) {
      body.document = document;
    }
    return this.request('POST', 'restore', body);
  }

  /**
   * Compare two points of a runtime: checkpoint references or `LIVE`; a live side is
   * compared with `document` (the open notebook's) when it is given.
   */
  diff(
    runtimeId: string,
    from: string,
    to: string,
    document?: INotebookDocument | null
  ): Promise<IDiffResult> {
    const body: Record<string, unknown> = { runtime_id: runtimeId, from, to };
    if (document) {
      body.document = document;
    }
    return this.request('POST', 'diff', body);
  }

  /**
   * Compare 2 to 8 sides (runtimes, each at "live", a checkpoint reference, or null for
   * live when live, else its head): variables, files and cells, a row per item.
   */
  compareMany(sides: ICompareSideRequest[]): Promise<ICompareResult> {
    return this.request('POST', 'compare', { sides });
  }

  /** Keep one child of a fan-out: its live and paused siblings are closed. */
  keep(runtimeId: string): Promise<IKeepResult> {
    return this.request('POST', `${enc(runtimeId)}/keep`, {});
  }

  /** Roll the runtime back to just before its last cell (with %autocheckpoint on). */
  undo(runtimeId: string): Promise<IUndoResult> {
    return this.request('POST', 'undo', { runtime_id: runtimeId });
  }

  checkout(checkpointId: string): Promise<ICheckoutResult> {
    return this.request('POST', 'checkout', { checkpoint_id: checkpointId });
  }

  pause(runtimeId: string): Promise<IPauseResult> {
    return this.request('POST', 'pause', { runtime_id: runtimeId });
  }

  resume(runtimeId: string): Promise<IResumeResult> {
    return this.request('POST', 'resume', { runtime_id: runtimeId });
  }

  close(runtimeId: string): Promise<ICloseResult> {
    return this.request('POST', 'close', { runtime_id: runtimeId });
  }

  deleteSnapshot(checkpointId: string): Promise<IDeleteSnapshotResult> {
    return this.request('POST', 'checkpoint/delete-snapshot', {
      checkpoint_id: checkpointId
    });
  }

  private async request<T>(
    method: 'GET' | 'POST',
    path: string,
    body?: unknown,
    query?: Record<string, string>
  ): Promise<T> {
    let url = URLExt.join(this.serverSettings.baseUrl, API_PREFIX, path);
    if (query && Object.keys(query).length > 0) {
      url += URLExt.objectToQueryString(query);
    }
    const init: RequestInit = { method };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers = { 'Content-Type': 'application/json' };
    }
    const response = await ServerConnection.makeRequest(url, init, this.serverSettings);
    const text = await response.text();
    let data: unknown;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!response.ok) {
      const answer = (data ?? {}) as { error?: unknown; message?: unknown };
      const code = typeof answer.error === 'string' ? answer.error : `HTTP${response.status}`;
      const message =
        typeof answer.message === 'string' ? answer.message : response.statusText || text;
      throw new DittoApiError(code, message, response.status);
    }
    return data as T;
  }
}

function enc(part: string): string {
  return encodeURIComponent(part);
}
