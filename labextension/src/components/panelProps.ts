/**
 * The props the panel's components pass down: the panel's state, the commands and the
 * translations, and for one runtime's item its record, whether it is pinned, and the time.
 */

import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';

import { IRuntimeRecord } from '../apiTypes';
import { PanelState } from '../state/panelState';

/** What every component of the panel reads. */
export interface IViewProps {
  state: PanelState;
  commands: CommandRegistry;
  trans: TranslationBundle;
}

/** One runtime of the list. */
export interface IRuntimeItemProps extends IViewProps {
  runtime: IRuntimeRecord;
  pinned: boolean;
  now: number;
}
