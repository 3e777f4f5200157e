/**
 * An operation's error in a notification (errorNotice.ts): JupyterLab cuts a message at
 * 140 characters, so the undo refusal lost its hint ("turn %autocheckpoint on…"). The
 * runtime's id reads as the notebook's name, and a long text keeps all of it for *Show all*.
 */

import { NOTIFICATION_LIMIT, errorNotice } from '../src/errorNotice';

const RUNTIME = '5f0c3a2e-9b1d-4c7e-8a6f-2d4b1e9c0a37';

/** The undo refusal as the server words it (issue 40, §10). */
const REFUSAL =
  `Conflict: the head of runtime ${RUNTIME}, checkpoint 3f2a9c1b0d4e (first), was not ` +
  'taken by %autocheckpoint: there is no last cell to undo (turn %autocheckpoint on, or ' +
  'restore a checkpoint by name)';

describe('errorNotice', () => {
  it("names the notebook instead of the runtime's id, and keeps the whole refusal", () => {
    const notice = errorNotice(REFUSAL, RUNTIME, 'work.ipynb');
    expect(notice.full).toBe(REFUSAL.replace(RUNTIME, 'work.ipynb'));
    expect(notice.full).toContain('turn %autocheckpoint on, or restore a checkpoint by name');
    expect(notice.full).not.toContain(RUNTIME);
    expect(notice.message.length).toBeLessThanOrEqual(NOTIFICATION_LIMIT);
    expect(notice.message.endsWith('…')).toBe(true);
    expect(notice.full?.startsWith(notice.message.slice(0, -1))).toBe(true);
    expect(notice.message).not.toMatch(/\s…$/); // cut at a word
  });

  it('shows a short text whole, with nothing more to show', () => {
    const text = 'Conflict: runtime work.ipynb is paused; resume it first';
    expect(errorNotice(text, RUNTIME, 'work.ipynb')).toEqual({ message: text, full: null });
    expect(errorNotice(text)).toEqual({ message: text, full: null });
  });

  it('leads with a hint the server puts first, within what the notification shows', () => {
    const text =
      `Conflict: turn %autocheckpoint on to undo cells: the head of runtime ${RUNTIME}, ` +
      'checkpoint 3f2a9c1b0d4e (first), was not taken by %autocheckpoint';
    const notice = errorNotice(text, RUNTIME, 'work.ipynb');
    expect(notice.message.startsWith('Conflict: turn %autocheckpoint on to undo cells')).toBe(true);
  });
});
