// Front-end unit tests: the pure modules (tree layout, windowing, timelines) and the panel's
// state (server cache, runtime events) under ts-jest, in node; the browser test
// (tests/browser/ in Python) covers the widgets.
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testRegex: '\\.spec\\.ts$',
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: '<rootDir>/tsconfig.test.json' }]
  }
};
