// A real OpenID provider for the tests (npm's oidc-provider, its development login pages: any
// password). Accounts and their groups come from the JSON file PSIRAG_OIDC_ACCOUNTS names, read
// again at every sign-in, so a test moves a person to another group by rewriting it.
//
// Environment: PSIRAG_OIDC_MODULE (the installed oidc-provider folder), PSIRAG_OIDC_HOST,
// PSIRAG_OIDC_PORT, PSIRAG_OIDC_CLIENT_ID, PSIRAG_OIDC_CLIENT_SECRET, PSIRAG_OIDC_REDIRECT_URI,
// PSIRAG_OIDC_ACCOUNTS. Prints "listening <issuer>" once it serves.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const env = process.env;
const module = await import(pathToFileURL(`${env.PSIRAG_OIDC_MODULE}/lib/index.js`).href);
const Provider = module.default ?? module.Provider;
const issuer = `http://${env.PSIRAG_OIDC_HOST}:${env.PSIRAG_OIDC_PORT}`;

function accounts() {
  return JSON.parse(readFileSync(env.PSIRAG_OIDC_ACCOUNTS, "utf8"));
}

const provider = new Provider(issuer, {
  clients: [{
    client_id: env.PSIRAG_OIDC_CLIENT_ID,
    client_secret: env.PSIRAG_OIDC_CLIENT_SECRET,
    redirect_uris: [env.PSIRAG_OIDC_REDIRECT_URI],
    grant_types: ["authorization_code"],
    response_types: ["code"],
  }],
  scopes: ["openid", "profile", "email", "groups"],
  claims: { openid: ["sub"], profile: ["preferred_username", "name"], email: ["email"],
            groups: ["groups"] },
  conformIdTokenClaims: false, // the groups and the name travel in the ID token
  cookies: { keys: ["psirag-kb-tests-only-not-a-secret"] },
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, sub) {
    const known = accounts()[sub];
    if (!known) return undefined;
    return {
      accountId: sub,
      async claims() {
        const now = accounts()[sub] ?? known;
        return { sub, preferred_username: sub, name: sub, email: `${sub}@example.org`,
                 groups: now.groups };
      },
    };
  },
});
provider.proxy = false;
provider.listen(Number(env.PSIRAG_OIDC_PORT), env.PSIRAG_OIDC_HOST, () => {
  console.log(`listening ${issuer}`);
});
