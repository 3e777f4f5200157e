/**
 * A checkpoint taken inside a kernel (%checkpoint, %autocheckpoint) gets the document of
 * the notebook open in JupyterLab: the panel answers its "pending" event
 * (state/pendingDocuments.ts).
 */

import { DittoApiError } from '../src/api';
import { INotebookDocument, IRuntimeEvent, RUNTIME_EVENT_SCHEMA_ID } from '../src/apiTypes';
import { answerPendingDocument } from '../src/state/pendingDocuments';

const DOCUMENT: INotebookDocument = {
  cells: [{ cell_type: 'code', id: 'a', source: 'x = 1  # unsaved', outputs: [], metadata: {} }],
  metadata: {},
  nbformat: 4,
  nbformat_minor: 5
};

function checkpointEvent(fields: Partial<IRuntimeEvent> = {}): IRuntimeEvent {
  return {
    schema_id: RUNTIME_EVENT_SCHEMA_ID,
    action: 'checkpoint',
    runtime_id: 'r1',
    checkpoint_id: 'c1',
    duration_ms: 1,
    ok: true,
    document: 'pending',
    ...fields
  };
}

function server(answer: () => Promise<unknown> = () => Promise.resolve({})) {
  const sent: [string, string, INotebookDocument][] = [];
  return {
    sent,
    submitDocument: (runtimeId: string, checkpointId: string, document: INotebookDocument) => {
      sent.push([runtimeId, checkpointId, document]);
      return answer();
    }
  };
}

const openHere = (runtimeId: string): INotebookDocument | null =>
  runtimeId === 'r1' ? DOCUMENT : null;

describe('answering pending documents', () => {
  it('sends the open notebook as the user sees it for a pending checkpoint', async () => {
    const api = server();
    expect(await answerPendingDocument(api, openHere, checkpointEvent())).toBe('sent');
    expect(api.sent).toEqual([['r1', 'c1', DOCUMENT]]);
  });

  it('sends nothing for a checkpoint whose document is recorded already', async () => {
    const api = server();
    for (const document of [
      'request',
      'front_end',
      'saved_file',
      'none',
      null,
      undefined
    ] as const) {
      const outcome = await answerPendingDocument(api, openHere, checkpointEvent({ document }));
      expect(outcome).toBe('not-pending');
    }
    expect(await answerPendingDocument(api, openHere, checkpointEvent({ action: 'restore' }))).toBe(
      'not-pending'
    );
    expect(await answerPendingDocument(api, openHere, checkpointEvent({ ok: false }))).toBe(
      'not-pending'
    );
    expect(api.sent).toEqual([]);
  });

  it('says nothing when the runtime has no notebook open here', async () => {
    const api = server();
    const outcome = await answerPendingDocument(
      api,
      openHere,
      checkpointEvent({ runtime_id: 'r2' })
    );
    expect(outcome).toBe('not-open');
    expect(api.sent).toEqual([]);
  });

  it('takes a 409 (another JupyterLab answered first) as no failure', async () => {
    const debug = jest.spyOn(console, 'debug').mockImplementation(() => undefined);
    const api = server(() =>
      Promise.reject(new DittoApiError('InvalidRequest', 'the document of c1 is recorded', 409))
    );
    expect(await answerPendingDocument(api, openHere, checkpointEvent())).toBe('taken');
    expect(debug).toHaveBeenCalled();
    debug.mockRestore();
  });

  it('logs any other failure', async () => {
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    const api = server(() => Promise.reject(new DittoApiError('StoreUnavailable', 'down', 503)));
    expect(await answerPendingDocument(api, openHere, checkpointEvent())).toBe('failed');
    expect(warn).toHaveBeenCalledWith(expect.stringContaining('c1'), 'StoreUnavailable: down');
    warn.mockRestore();
  });
});
