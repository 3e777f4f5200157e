/**
 * A fan-out group in a checkpoint tree, right under the checkpoint it started from:
 * "4 branches", opening to each child, and Compare for the branches side by side.
 */

import { TranslationBundle } from '@jupyterlab/translation';
import { caretDownIcon, caretRightIcon } from '@jupyterlab/ui-components';
import { CommandRegistry } from '@lumino/commands';
import * as React from 'react';

import { IFanoutGroup, groupText } from '../branches/fanout';
import { CommandIDs } from '../commandIds';

/** Props of `FanoutGroupRow`. */
export interface IFanoutGroupRowProps {
  group: IFanoutGroup;
  graph: JSX.Element;
  index: number;
  count: number;
  top: number;
  height: number;
  expanded: boolean;
  commands: CommandRegistry;
  trans: TranslationBundle;
  onToggle: () => void;
}

/** The row of one fan-out group. */
export function FanoutGroupRow(props: IFanoutGroupRowProps): JSX.Element {
  const { group, expanded, commands, trans } = props;
  const text = groupText(group, (m, ...a) => trans.__(m, ...a));
  const args = { fanoutId: group.id };
  return (
    <div
      role="treeitem"
      aria-level={2}
      aria-posinset={props.index + 1}
      aria-setsize={props.count}
      aria-expanded={expanded}
      aria-label={trans.__('%1 from this checkpoint', text)}
      className="jp-DittoCheckpoint jp-DittoFanout"
      data-fanout-id={group.id}
      style={{ top: props.top, height: props.height }}
    >
      {props.graph}
      <button
        className="jp-DittoFanout-toggle"
        aria-expanded={expanded}
        aria-label={expanded ? trans.__('Hide the %1', text) : trans.__('Show the %1', text)}
        onClick={props.onToggle}
      >
        {expanded ? <caretDownIcon.react tag="span" /> : <caretRightIcon.react tag="span" />}
        <span className="jp-DittoFanout-text">{text}</span>
      </button>
      {commands.isEnabled(CommandIDs.compareBranches, args) ? (
        <button
          className="jp-DittoButton jp-mod-styled jp-DittoFanout-compare"
          aria-label={trans.__('Compare the %1', text)}
          title={trans.__('Variables, files and cells of the branches side by side')}
          onClick={() => void commands.execute(CommandIDs.compareBranches, args)}
        >
          {trans.__('Compare')}
        </button>
      ) : null}
    </div>
  );
}
