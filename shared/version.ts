// devop's version, apart from the agent contract (zod) so that `devop --version` and help load nothing else.
/**
 * The agent's own version; the CLI compares it with HelloOk and the ready line. Kept equal to package.json's version.
 */
export const AGENT_VERSION = '0.1.0';
