/**
 * An operation's error as a notification shows it. JupyterLab cuts a notification's message
 * at 140 characters, and the end of a server's sentence is often its hint ("turn
 * %autocheckpoint on…"): a longer text is cut at a word and its whole text kept for a
 * *Show all* action. A runtime's id reads as its notebook's name.
 */

/** The characters JupyterLab's notifications show before they cut a message. */
export const NOTIFICATION_LIMIT = 140;

/** What the notification shows, and the whole text when that was cut (else null). */
export interface IErrorNotice {
  message: string;
  full: string | null;
}

/**
 * The notification of an error `text`: the runtime's id (when given) replaced by its
 * notebook's name, and a text over the limit cut at a word, with an ellipsis.
 */
export function errorNotice(
  text: string,
  runtimeId: string | null = null,
  name: string | null = null
): IErrorNotice {
  const named = runtimeId && name ? text.split(runtimeId).join(name) : text;
  if (named.length <= NOTIFICATION_LIMIT) {
    return { message: named, full: null };
  }
  const room = named.slice(0, NOTIFICATION_LIMIT - 1);
  const space = room.lastIndexOf(' ');
  const cut = space > NOTIFICATION_LIMIT / 2 ? room.slice(0, space) : room;
  return { message: `${cut.trimEnd()}…`, full: named };
}
