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
  ICheckpointDetail,
  ICheckpointPage,
  ICheckpointResult,
  ICloseResult,
  IDeleteSnapshotResult,
  IPauseResult,
  IRestoreResult,
  IResumeResult,
  IRuntimeLineage,
  IRuntimeRecord
} from './apiTypes';

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

  checkpoint(runtimeId: string, name?: string): Promise<ICheckpointResult> {
    const body: Record<string, unknown> = { runtime_id: runtimeId };
    if (name) {
      body.name = name;
    }
    return this.request('POST', 'checkpoint', body);
  }

  restore(runtimeId: string, checkpointId: string): Promise<IRestoreResult> {
    return this.request('POST', 'restore', {
      runtime_id: runtimeId,
      checkpoint_id: checkpointId
    });
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
