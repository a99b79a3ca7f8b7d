pub struct OstHandler;
