/**
 * Reattach an open notebook to its runtime's new kernel, without reloading the page.
 *
 * Resume keeps the runtime id (the Jupyter session id) and the notebook path, and gives
 * the session a new kernel. Two cases on the JupyterLab side:
 * - the notebook still holds its session connection (JupyterLab's session poll has not
 *   run since the pause): refreshing the sessions updates it to the new kernel;
 * - the poll saw the session gone while paused and disposed the connection: the
 *   notebook's SessionContext has no session left, and its public API can only start a
 *   new session (a new id, which would be a new runtime). So the existing session is
 *   connected through the session manager and handed to the SessionContext the way it
 *   hands its own new sessions over (`_handleNewSession`, stable through JupyterLab 4).
 */

import { ISessionContext, SessionContext } from '@jupyterlab/apputils';
import { Session } from '@jupyterlab/services';

/** The part of SessionContext that takes over a session connection. */
interface ISessionHandover {
  _handleNewSession(session: Session.ISessionConnection | null): unknown;
}

function canHandOver(context: unknown): context is ISessionHandover {
  return (
    context instanceof SessionContext &&
    typeof (context as unknown as ISessionHandover)._handleNewSession === 'function'
  );
}

/**
 * Connect `context` (an open notebook's) to session `runtimeId`, now on kernel `kernelId`.
 *
 * Returns true when the notebook is attached to that kernel.
 */
export async function reattachNotebook(
  context: ISessionContext,
  sessions: Session.IManager,
  runtimeId: string,
  kernelId: string
): Promise<boolean> {
  await sessions.refreshRunning();
  const current = context.session;
  if (current && !current.isDisposed && current.id === runtimeId) {
    // The refresh updated the connection (the manager's poll result names the new kernel).
    return current.kernel?.id === kernelId;
  }
  const model = await sessions.findById(runtimeId);
  if (!model || !canHandOver(context)) {
    return false;
  }
  const connection = sessions.connectTo({ model });
  context._handleNewSession(connection);
  return connection.kernel?.id === kernelId;
}
