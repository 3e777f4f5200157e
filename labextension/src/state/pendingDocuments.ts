/**
 * Checkpoints taken inside a kernel (`%checkpoint`, `%autocheckpoint`) get their notebook
 * document from the front end: their runtime event says `document: "pending"`, and the
 * JupyterLab that has the runtime's notebook open answers with the document as the user
 * sees it (`POST .../checkpoint/document`, unsaved edits included).
 *
 * Every JupyterLab with the notebook open answers; the server keeps the first answer and
 * refuses the others (409), which is no failure of this one. A JupyterLab without the
 * notebook open says nothing, and the server records the saved file once it stops waiting.
 */

import { DittoApiError, RuntimeApi, errorText } from '../api';
import { INotebookDocument, IRuntimeEvent } from '../apiTypes';

/** Finds the document of a runtime's open notebook (null: not open here). */
export type DocumentFinder = (runtimeId: string) => INotebookDocument | null;

/** What was done with one event. */
export type PendingOutcome = 'sent' | 'not-pending' | 'not-open' | 'taken' | 'failed';

/** Answer one runtime event when it is a checkpoint waiting for its document. */
export async function answerPendingDocument(
  api: Pick<RuntimeApi, 'submitDocument'>,
  findDocument: DocumentFinder,
  event: IRuntimeEvent
): Promise<PendingOutcome> {
  const pending =
    event.ok &&
    (event.action === 'checkpoint' || event.action === 'pause') &&
    event.document === 'pending' &&
    typeof event.checkpoint_id === 'string';
  if (!pending) {
    return 'not-pending';
  }
  const document = findDocument(event.runtime_id);
  if (!document) {
    return 'not-open';
  }
  try {
    await api.submitDocument(event.runtime_id, event.checkpoint_id as string, document);
    return 'sent';
  } catch (error) {
    if (error instanceof DittoApiError && error.status === 409) {
      // Another front end answered first, or the server stopped waiting: it said which.
      console.debug(`ditto-jupyter: document of ${event.checkpoint_id} not taken:`, error.message);
      return 'taken';
    }
    console.warn(
      `ditto-jupyter: could not send the document of checkpoint ${event.checkpoint_id}:`,
      errorText(error)
    );
    return 'failed';
  }
}
