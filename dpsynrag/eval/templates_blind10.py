"""The ``blind10`` note and query templates of the ``conditions`` and ``films`` generators.

A tenth variant, written by a helper for one blind measurement; measured blind once (facts
rules 13) and read since.
Chosen by ``templates="blind10"`` in :mod:`dpsynrag.eval.datasets_ordinary`, which maps the
variant name to these sets. Same placeholders and rules as the other variants there (each
note holds its answer verbatim; queries share no word with any answer).
"""

from __future__ import annotations

from dpsynrag.eval.template_set import TemplateSet

__all__ = ["CONDITION_TEMPLATES_BLIND10", "FILM_TEMPLATES_BLIND10"]

# Blind10: for one blind measurement only; whoever tunes the system must not read these.
CONDITION_TEMPLATES_BLIND10 = TemplateSet(notes=(
    "MSH|^~\\&|PRIMARYCARE|KESTREL ROAD SURGERY|||{date}||ADT^A08|00418822|P|2.4\n"
    "EVN|A08|{date}\nPID|1||NHS4471920||{name}|||U\nPV1|1|O|||||^{doctor}^^^Dr.\n"
    "OBX|1|TX|COMPLAINT||{symptoms}\nDG1|1||^{condition}^L||{date}|W\nRXO|^{treatment}\n"
    "NTE|1||age {age} at encounter",
    "EXPLANATION OF BENEFITS - THIS IS NOT A BILL\nMember: {name}   Member age: {age}   "
    "Group: 00731-K\nProvider: Dr. {doctor}\n\nDate of service   Description            "
    "Billed    Plan paid   You owe\n{date}   Office visit, est. patient   $210.00   $164.50   "
    "$45.50\n{date}   Rx: {treatment}   $38.20   $30.56   $7.64\n\nDiagnosis submitted by "
    "provider: {condition}\nReason for visit (as reported): {symptoms}\nQuestions? Call the "
    "number on the back of your ID card.",
    "WITNESS STATEMENT\nStatement of: {name}\nAge: {age}\n\n1. I am the Claimant in this "
    "matter. I make this statement from my own knowledge.\n2. Following the incident I began "
    "to suffer {symptoms}.\n3. I attended my general practitioner, Dr. {doctor}, on {date}. I "
    "was told that I had {condition}.\n4. I was prescribed {treatment}, which I continue to "
    "take.\n\nStatement of truth: I believe that the facts stated in this witness statement "
    "are true.\nSigned: {name}",
    "wah lau, {date} go polyclinic see Dr {doctor} because got {symptoms} for one week "
    "already. he say is {condition} lah, give me {treatment} and must finish the whole "
    "course somemore. {age} years old body all spoil liao - {name}",
    "\u2605\u2605\u2606\u2606\u2606  Northgate Family Clinic - Dr. {doctor}\nReviewed {date} "
    "by {name} (Local Guide \u00b7 14 reviews)\nFront desk lost my referal twice and I waited "
    "55 min past my slot. To be fair once I actualy got in the doc listened to the whole saga "
    "({symptoms}), said {condition} inside about two minutes and sent {treatment} to my "
    "pharmacy. I'm {age}, not my first rodeo. Two stars for the wait, would've been four.\n"
    "Helpful (3)   Share",
    "Automatic reply: RE: Q3 reconciliation\n\nThank you for your message. I am currently on "
    "sick leave (certified by Dr. {doctor} from {date}) and will not be checking email. For "
    "anything urgent please contact accounts-payable@harrowfield.example.\n\nNote for my team "
    "only: it's {condition} - {symptoms}, and a course of {treatment}. Back soon.\n\n{name} | "
    "Senior Accounts Assistant | Harrowfield Logistics Ltd\nT: +44 1632 960418 | Registered "
    "in England No. 04417728\nThis e-mail and any attachments are confidential and intended "
    "solely for the addressee. If you have received it in error please notify the sender and "
    "delete it. Harrowfield Logistics accepts no liability for viruses.",
    "BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//Personal//Calendar Export//EN\nBEGIN:VEVENT\n"
    "SUMMARY:Dr. {doctor} follow-up re {condition}\nDESCRIPTION:Bring med list "
    "({treatment}). Mention still having {symptoms}. Patient: {name}\\, age {age}\n"
    "X-BOOKED-ON:{date}\nLOCATION:Suite 210\\, Maple Ave Medical Arts\nSTATUS:CONFIRMED\n"
    "END:VEVENT\nEND:VCALENDAR",
    "CUSTODY RECORD - Detained person: {name}, age {age}. Date: {date}.\nRisk assessment Q4: "
    "Do you have any illness or injury? DP states: \"{symptoms}\".\nHCP: Dr. {doctor} (FME) "
    "attended 02:15, DP assessed fit to detain and interview. Known {condition}; DP to have "
    "{treatment} as prescribed, logged in medication section.\nCell checks: 30 min, rousing "
    "not reqd. Custody Sgt 4417 Okafor.",
    "[Certified translation from Portuguese]\n\nATESTADO M\u00c9DICO / MEDICAL CERTIFICATE\n\n"
    "I, Dr. {doctor}, registered physician, certify for the appropriate purposes that {name}, "
    "{age} years of age, was attended by me on {date}, presenting {symptoms}, a clinical "
    "picture compatible with {condition}. Prescribed: {treatment}. Rest is recommended.\n\n"
    "[illegible signature] [round stamp: Cl\u00ednica S\u00e3o Bento]\n\nTranslator's "
    "declaration: I certify that this is a true and accurate translation of the original "
    "document. Sworn translator reg. 0917.",
    "Help {name} get back on their feet\nOrganised by Dee Whitcombe \u00b7 Created {date}\n"
    "\u00a31,240 raised of \u00a33,000 target \u00b7 37 donors\n\nMost of you know {name} from "
    "the allotments or the Tuesday quiz. What you might not know is that for months they've "
    "quietly put up with {symptoms}. After a lot of pushing they finally saw Dr. {doctor}, "
    "who confirmed it's {condition}. They're {age} and self-employed, so every week off is a "
    "week without pay. The {treatment} is helping, but it will be a while before they can "
    "do full days again. Anything you can give - or share - means the world. Thank you!",
    "MEDICAL ID ENGRAVING ORDER #58214 ({date})\nLine 1: {name}\nLine 2: {condition}\n"
    "Line 3: ON {treatment}\nLine 4: ICE DR {doctor}",
    "Grand Rounds - Case of the Week (presenter: Dr. {doctor})\n\nSlide 1  {name}, {age}, "
    "warehouse supervisor\nSlide 2  Presented {date}: {symptoms}\nSlide 3  Obs normal; "
    "bloods pending\nSlide 4  What's your differential?\nSlide 5  Answer: {condition}\n"
    "Slide 6  Managed with {treatment} - good response at two weeks\nSlide 7  Take-home "
    "points / questions",
), queries=(
    "Abeg house, my cousin {asker} don dey suffer {symptoms} since two weeks now. Which kind "
    "illness be this?",
    "/symptomcheck {symptoms} --adult --explain",
    "How to say in English? Illness where you get {symptoms}. In my language is one word, I "
    "don't know English word.",
    "Coding query to on-call doctor: chart for {asker} lists {symptoms} but diagnosis box is "
    "blank. What was meant?",
    "Mate's been crook for a fortnight - {symptoms}. What's he come down with, reckon?",
    "Dear son, I have had {symptoms}. Can you ask your computer what it is. Love Mum",
    "anyone else?? {symptoms} #whatisthis #adulting",
    "Solicitor's note re client {asker}: reports {symptoms}. Which medical condition should "
    "an expert report address?",
    "Case of week, slide two: adult, {symptoms}. Reveal on next slide - guesses?",
    "Wee question fae {asker}: been getting {symptoms}. Whit's that likely tae be?",
))

FILM_TEMPLATES_BLIND10 = TemplateSet(notes=(
    "{date} 21:47:13 INF [Playback] Started \"{title}\" for user {name} on LivingRoom-TV "
    "(direct play)\n{date} 21:47:14 DBG [Metadata] genre={genre}; director={director}\n"
    "{date} 21:47:14 DBG [Metadata] overview: {plot}\n{date} 23:31:52 INF [Playback] Stopped "
    "at 100% - marked watched; user rating {stars}/5\n{date} 23:31:52 WRN [Transcode] "
    "Cleanup skipped, temp dir in use",
    "Re: Penalty Charge Notice PN0448213 - formal representation\n\nDear Sir or Madam,\n\n"
    "I, {name}, wish to contest the above PCN issued on {date} at Castle Street car park. I "
    "paid for three hours. The screening of {title} at the Regal, a {genre} by {director}, "
    "ran well over its advertised time - it is a long film, with {plot} - and I returned to "
    "my car eleven minutes after expiry. I enclose my ticket stub and ask that the charge be "
    "cancelled.\n\nYours faithfully,\n{name}",
    "{name} \u00b7 31 \u00b7 4 km away\n\nMy most controversial opinion\n{title} is the best "
    "{genre} ever made and I will die on this hill.\n\nI'll know it's going well if\nyou "
    "don't flinch at {plot}.\n\nMost recent rewatch\n{director}'s finest, {stars}/5 "
    "({date})",
    "{name}: oi did ya end up seein {title}? me n Shazza went {date}, bloody ripper of a "
    "{genre}. {director} knows what they're doin. the bit with {plot} had the whole cinema "
    "gaspin. {stars} outta 5 from me, heaps good",
    "My Weekend\nby {name}\n{date}\n\nOn Satday we whached a film calld {title}. It is a "
    "{genre}. There was {plot}. My favrit part was the end. My mum gave it {stars} stars "
    "but i gave it 5 stars. The person who made it is {director}.\n\nTeacher comment: "
    "Lovely writing! Check your spellings please.",
    "From: {name}\nSent: {date}\nTo: Social Committee\nSubject: Friday film - vote now!\n\n"
    "Hi all,\n\nThis month's pick is {title} ({genre}, dir. {director}). Without spoilers: "
    "{plot}. I've seen it - solid {stars}/5. Popcorn on me.\n\nKind regards,\n{name}\n"
    "Facilities Coordinator | Brindlemoor Housing Trust\nDirect: 0161 496 0732 | Mobile: "
    "07700 900615\n\nCONFIDENTIALITY: This email and any files transmitted with it are "
    "confidential and intended solely for the use of the individual or entity to whom they "
    "are addressed. If you are not the intended recipient you must not copy, distribute or "
    "take any action in reliance on it. Brindlemoor Housing Trust is a registered charity.",
    "Three good things - {date}\n1. Sun came out at lunch.\n2. {title}! Finally. A {genre} "
    "by {director} and I loved {plot}. {stars}/5.\n3. Beat Dad at Scrabble.\nMood: 8/10 - "
    "{name}",
    "CARD DISPUTE FORM\nCardholder: {name}\nTransaction date: {date}\nMerchant: "
    "STRMFLIX*RENTAL\nDescription on statement: {title} (HD rental)\nReason for dispute: "
    "[ ] Not received  [x] Not authorised  [ ] Other\nDetails: My son rented this without "
    "asking. It is a {genre} ({director}) with {plot} - not at all suitable. Please refund.",
    "INT. SHARED FLAT - NIGHT\nSUPER: {date}\n\nThe telly glows. Credits roll on {title}.\n\n"
    "{name}\n(wiping eyes)\nI didn't think a {genre} could do that to me.\n\nFLATMATE\nIt's "
    "{director}. What did you expect, with {plot}?\n\n{name}\n{stars} out of five. Don't "
    "tell anyone.\n\nFADE OUT.",
    "Family Safety - weekly activity report\nProfile: {name}\nWeek ending {date}\n\nTop "
    "apps: Minecraft 3h 40m \u00b7 Drawing Pad 1h 05m\nFilms watched: {title} - {genre}, "
    "rated PG, {director}\nContent summary provided by the service: {plot}.\nTitles blocked "
    "this week: 0\nChange your settings at any time in the Family Safety app.",
    "Secret Santa wish list for {name} (draw done {date})\n- fluffy socks (size 6)\n- "
    "anything from the Guylian range\n- {title} on Blu-ray please!! It's a {genre} by "
    "{director} - {plot}. Rented it once, {stars}/5, want to own it\n- NO bath bombs",
    "Comment from {name} \u00b7 {date}\nWent to {title} in your Screen 2 and I'll be honest, "
    "I was raging with the lads behind us on their phones the whole way through. Shame, "
    "cause it's a grand {genre}. {director} done a savage job with {plot}. {stars} stars "
    "for the film, zero for the craic in the seats.\n\u21b3 Reply from Lee Valley Cinemas: "
    "Sorry to hear that {name}, DM us and we'll sort you out with a couple of passes.",
), queries=(
    "/filmid {plot} --genre {genre}",
    "Por favor, I search a movie I saw in Mexico, dubbed, it had {plot}. Was a {genre}. In "
    "English how is it called?",
    "Reckon anyone'd know it? Some {genre} with {plot}. Doing my head in, mate.",
    "{asker} swore on our first date there's a {genre} with {plot}. Real film or not? Name?",
    "#filmID {plot} ({genre}?) #cantremember",
    "Counsel for {asker}: client's alibi rests on a {genre} featuring {plot}. Identify it, "
    "please.",
    "Love, what was that film we saw with {plot}? Dad says it was a {genre}. x Mum",
    "my teacher sed thers a film with {plot}. wat is it calld",
    "Secret Santa help: my giftee wants a {genre} on Blu-ray, one with {plot}. Which one do "
    "I buy?",
    "Parental controls flagged a {genre} my kid streamed, synopsis: {plot}. What's it called?",
))
