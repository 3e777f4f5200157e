/**
 * The "Runtimes" side panel widget: it loads the runtime list once on screen and draws
 * the list (runtimesView.tsx) again whenever the panel's state changes.
 */

import { ReactWidget, UseSignal } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { Message } from '@lumino/messaging';
import * as React from 'react';

import { runtimesIcon } from '../icons';
import { PanelState } from '../state/panelState';
import { RuntimesView } from './runtimesView';

/** The side panel widget. */
export class RuntimesPanel extends ReactWidget {
  constructor(
    readonly state: PanelState,
    readonly commands: CommandRegistry,
    readonly trans: TranslationBundle
  ) {
    super();
    this.id = 'ditto-runtimes-panel';
    this.addClass('jp-DittoPanel');
    this.title.icon = runtimesIcon;
    this.title.caption = trans.__('Runtimes');
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', trans.__('Runtimes'));
  }

  /**
   * Load the runtime list the first time the panel is on screen. Watched in the DOM:
   * JupyterLab's sidebar shows a panel while its container is still hidden, so Lumino's
   * after-show message does not always reach it.
   */
  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (this.state.active || typeof IntersectionObserver === 'undefined') {
      void this.state.activate();
      return;
    }
    this._visibility = new IntersectionObserver(entries => {
      if (entries.some(entry => entry.isIntersecting)) {
        this._visibility?.disconnect();
        this._visibility = null;
        void this.state.activate();
      }
    });
    this._visibility.observe(this.node);
  }

  protected onBeforeDetach(msg: Message): void {
    this._visibility?.disconnect();
    this._visibility = null;
    super.onBeforeDetach(msg);
  }

  private _visibility: IntersectionObserver | null = null;

  render(): JSX.Element {
    return (
      <UseSignal signal={this.state.changed}>
        {() => <RuntimesView state={this.state} commands={this.commands} trans={this.trans} />}
      </UseSignal>
    );
  }
}
