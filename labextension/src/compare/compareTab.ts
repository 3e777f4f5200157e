/**
 * The Compare tab in JupyterLab's main area: one tab, reused by every comparison (a new
 * one replaces what it shows), opened again when the user closed it.
 */

import { MainAreaWidget } from '@jupyterlab/apputils';
import { JupyterFrontEnd } from '@jupyterlab/application';
import { TranslationBundle } from '@jupyterlab/translation';

import { CompareWidget, ComparisonState } from './compareView';
import { runtimesIcon } from '../icons';

/** The DOM id of the Compare tab. */
export const COMPARE_TAB_ID = 'ditto-compare';

/** Opens the Compare tab and puts comparisons in it. */
export class CompareTab {
  constructor(
    private shell: JupyterFrontEnd.IShell,
    private trans: TranslationBundle
  ) {}

  /** Show a comparison (loading, loaded or failed) in the tab, opening it first. */
  show(state: ComparisonState): void {
    let tab = this._tab;
    if (!tab || tab.isDisposed) {
      const content = new CompareWidget(this.trans);
      tab = new MainAreaWidget({ content });
      tab.id = COMPARE_TAB_ID;
      tab.title.icon = runtimesIcon;
      tab.title.closable = true;
      this._tab = tab;
    }
    tab.title.label = this.trans.__('Runtime compare');
    tab.title.caption = state.title;
    tab.content.setComparison(state);
    if (!tab.isAttached) {
      this.shell.add(tab, 'main');
    }
    this.shell.activateById(tab.id);
  }

  /** What the tab shows now (null: never opened, or closed). */
  get current(): ComparisonState | null {
    return this._tab && !this._tab.isDisposed ? this._tab.content.comparison : null;
  }

  private _tab: MainAreaWidget<CompareWidget> | null = null;
}
